//! The runtime: one wasmtime engine, one linker, and instances of `wasi:cli/run` components
//! and of standard `wasi:http/proxy` ones (`proxy`).
//!
//! It runs a component with the mounts, environment and stdio it is given and reports how the
//! run ended. It knows nothing of routing, actors or versions. Only this module and its
//! children name wasmtime types.

pub mod cache;
pub mod hibernate;
pub mod memory;
pub mod network;
pub mod proxy;
pub mod replay;
pub mod run_until;
pub mod stdio;
pub mod ticks;
pub mod wasi_fs;

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use wasmtime::component::{Component, HasData, Linker, ResourceTable};
use wasmtime::{Config, Engine, ResourceLimiter, Store};
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::{I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::fs::Mount;
use cache::Cache;
use hibernate::{Awake, Hibernated, Image, Sleepers};
use network::{HttpHooks, Network};
use run_until::RunUntil;
use stdio::{GuestInput, GuestOutput, Stdin, Stdout};
pub use ticks::EPOCH_TICK;
use ticks::{Ticker, Ticking, slices};
use wasi_fs::Hooks;
pub use wasi_fs::Replica;
use wasi_fs::{FsState, FsView};

/// An instance's linear memory when its manifest does not say (DESIGN §11): enough for most
/// actors, small enough that a runaway allocation loop traps long before the host runs short.
pub const DEFAULT_MEMORY_MB: u32 = 256;
/// The most memory an instance may be given (`"memory_mb"` in `actor.json`): 4 GiB is all a
/// 32-bit linear memory can address anyway.
pub const MAX_MEMORY_MB: u32 = 4096;

/// A compiled component, linked and ready to instantiate. Cheap to clone.
#[derive(Clone)]
pub struct Program {
    entry: Entry,
    /// Its memories as instantiation leaves them, from its first instance: what a packed
    /// instance of it gets back without keeping (`hibernate`).
    image: Arc<OnceLock<Image>>,
}

/// What the host calls of a component.
#[derive(Clone)]
enum Entry {
    /// `wasi:cli/run`: an actor reading messages on stdin.
    Command(CommandPre<Guest>),
    /// `wasi:http/incoming-handler`: a standard component, called once per `http` message
    /// (`proxy`).
    Proxy(ProxyPre<Guest>),
}

impl Program {
    /// Whether it is a standard `wasi:http/proxy` component rather than a command.
    pub fn serves_http(&self) -> bool {
        matches!(self.entry, Entry::Proxy(_))
    }
}

/// Everything one instance gets from its host.
pub struct InstanceConfig {
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    pub stdin: Arc<dyn GuestInput>,
    pub stdout: Stdout,
    pub stderr: Stdout,
    /// Outgoing `wasi:http`: the hosts it may reach and the credentials the host adds.
    /// `Network::default()` reaches nothing.
    pub network: Network,
    /// On a host of a cluster, where each change of the actor's files is copied first.
    pub replica: Option<Arc<dyn Replica>>,
    /// A shadow run's clock and seed (DESIGN §21); `None` runs on the host's clocks and
    /// random numbers.
    pub replay: Option<replay::Replay>,
    /// Where the instance's linear memory size (bytes) is kept while it runs, for `status`
    /// and the metrics (DESIGN §22); set to 0 when it ends.
    pub memory_in_use: Option<Arc<AtomicUsize>>,
    /// Pack the instance's pages as soon as it first waits for input (see `hibernate`): an
    /// actor of a world that starts many, which may wait long for its first message.
    pub pack_at_first_wait: bool,
}

impl InstanceConfig {
    pub fn output(output: impl GuestOutput) -> Stdout {
        Stdout::new(output)
    }
}

/// How an instance ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// `run` returned success, or the guest called `exit(0)`.
    Clean,
    /// The guest exited with this non-zero code (`run` returning an error counts as 1).
    Code(i32),
    /// The guest trapped (a panic, an out-of-bounds access, …) or could not be instantiated.
    Trap(String),
    /// The guest's memory would have grown past its limit of this many MiB (at instantiation
    /// or later): a trap too, named so that the host can say how to raise the limit.
    MemoryLimit(u32),
    /// The host stopped it: a graceful stop ran out of time, or the host is going away.
    Killed,
}

impl Exit {
    pub fn is_clean(&self) -> bool {
        *self == Exit::Clean
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Clean => f.write_str("exited cleanly"),
            Exit::Code(code) => write!(f, "exited with code {code}"),
            Exit::Trap(message) => write!(f, "trapped: {message}"),
            Exit::MemoryLimit(mb) => write!(f, "trapped: memory would grow past its {mb} MiB"),
            Exit::Killed => f.write_str("killed"),
        }
    }
}

/// The engine and linker shared by every instance of the world.
pub struct Runtime {
    engine: Engine,
    linker: Linker<Guest>,
    /// Compiled components on disk; without it every start compiles.
    cache: Option<Cache>,
    /// Every instance, for the thread that packs the idle ones.
    sleepers: Arc<Sleepers>,
    /// Ticks the epoch while guests run.
    ticker: Arc<Ticker>,
    /// Until when guests may run: forever on a single host, until the next lease renewal's
    /// deadline on a host of a cluster (which moves it).
    run_until: Arc<RunUntil>,
}

impl Runtime {
    /// Builds the engine and starts the thread that ticks its epoch while guests run.
    /// Compiled components are kept in `cache_dir` when one is given.
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Arc<Runtime>> {
        Runtime::bounded(cache_dir, RunUntil::forever())
    }

    /// [`Runtime::new`] whose guests run only while `run_until` allows (a host of a cluster).
    pub fn bounded(cache_dir: Option<PathBuf>, run_until: Arc<RunUntil>) -> Result<Arc<Runtime>> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        // Linear memories and fiber stacks come from `memory`: mappings without reservations
        // or guards, so that 100,000 instances fit the process's address space and mappings.
        // Compiled code then checks every memory access against the memory's size.
        config
            .memory_reservation(0)
            .memory_guard_size(0)
            .guard_before_linear_memory(false)
            .memory_reservation_for_growth(0)
            .memory_init_cow(false)
            .with_host_memory(Arc::new(memory::Mapper))
            .with_host_stack(Arc::new(memory::Mapper));
        if std::env::var_os("SAUSAGE_PERF_MAP").is_some() {
            // `perf report` names guests' functions from /tmp/perf-<pid>.map (docs/profile.md).
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config)?;
        let linker = link(&engine)?;

        let ticker = Ticker::start(&engine)?;
        let cache = cache_dir.map(|dir| Cache::new(dir, &engine));
        let sleepers = Arc::new(Sleepers::default());
        Sleepers::start_sweeping(&sleepers).context("cannot start the hibernation thread")?;
        Ok(Arc::new(Runtime {
            engine,
            linker,
            cache,
            sleepers,
            ticker,
            run_until,
        }))
    }

    /// Until when this host's guests may run.
    pub fn run_until(&self) -> &Arc<RunUntil> {
        &self.run_until
    }

    /// Compiles and links a component. The error says why the bytes cannot run as an actor.
    pub fn compile(&self, wasm: &[u8]) -> Result<Program> {
        if wasm.starts_with(b"\0asm\x01\0\0\0") {
            anyhow::bail!(
                "this is a core WebAssembly module, not a component; build it for the \
                 `wasm32-wasip2` target"
            );
        }
        if !wasm.starts_with(b"\0asm") {
            anyhow::bail!("this is not a WebAssembly file (no `\\0asm` header)");
        }
        let component = match &self.cache {
            Some(cache) => cache.component(&self.engine, wasm).map(|(c, _)| c),
            None => Component::new(&self.engine, wasm).map_err(anyhow::Error::from),
        }
        .map_err(|e| anyhow::anyhow!("not a valid component: {e:#}"))?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| anyhow::anyhow!("cannot link the component: {e:#}"))?;
        // A component made for `wasmtime serve` may export `wasi:cli/run` too (a Rust binary
        // does): its handler is what it is for.
        let serves_http = component
            .component_type()
            .exports(&self.engine)
            .any(|(name, _)| name.starts_with(proxy::HANDLER_EXPORT));
        let entry = match serves_http {
            true => Entry::Proxy(ProxyPre::new(pre).map_err(|e| {
                anyhow::anyhow!("its `wasi:http/incoming-handler` cannot be called: {e:#}")
            })?),
            false => Entry::Command(CommandPre::new(pre).map_err(|e| {
                anyhow::anyhow!(
                    "the component exports neither `wasi:cli/run` nor \
                     `wasi:http/incoming-handler`: {e:#}"
                )
            })?),
        };
        Ok(Program {
            entry,
            image: Arc::default(),
        })
    }

    /// What the idle instances have packed now (see `hibernate`).
    pub fn hibernated(&self) -> Hibernated {
        self.sleepers.hibernated()
    }

    /// Packs every instance not polled since the last sweep, now: what the sweep thread does
    /// every [`hibernate::HIBERNATE_AFTER`] (tests call it rather than wait).
    pub fn hibernate_idle(&self) {
        self.sleepers.sweep();
    }

    /// Runs one instance to its end with the default memory limit ([`DEFAULT_MEMORY_MB`]).
    /// Dropping the future kills the instance: its uncommitted writes are discarded with its
    /// store.
    pub async fn run(&self, program: &Program, config: InstanceConfig) -> Exit {
        self.run_with(program, config, DEFAULT_MEMORY_MB, || ())
            .await
    }

    /// [`Runtime::run`] with a memory limit of `memory_mb` MiB, calling `on_running` once the
    /// instance exists, just before `wasi:cli/run` is called. That is the earliest point at
    /// which the guest's own code runs (a `wasm32-wasip2` command has no start function; its
    /// constructors and `main` run inside `run`), and it is never reached when instantiation
    /// fails. Memory growing past the limit traps the instance: [`Exit::MemoryLimit`].
    pub async fn run_with(
        &self,
        program: &Program,
        config: InstanceConfig,
        memory_mb: u32,
        on_running: impl FnOnce(),
    ) -> Exit {
        let mut wasi = WasiCtxBuilder::new();
        let (input, output, errors) = (
            config.stdin.clone(),
            config.stdout.clone(),
            config.stderr.clone(),
        );
        let hooks = Hooks {
            stdin: config.stdin.clone(),
            stdout: config.stdout.clone(),
            replica: config.replica.clone(),
        };
        wasi.stdin(Stdin(config.stdin))
            .stdout(config.stdout)
            .stderr(config.stderr)
            .envs(&config.env)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(replay) = &config.replay {
            replay.apply(&mut wasi);
        }
        let guest = Guest {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            hooks: HttpHooks {
                network: config.network,
            },
            fs: FsState::new(config.mounts, Some(hooks)),
            memory: MemoryLimit {
                bytes: memory_mb as usize * MIB,
                reached: false,
                in_use: config.memory_in_use.clone(),
            },
        };
        let mut store = Store::new(&self.engine, guest);
        store.limiter(|guest| &mut guest.memory);
        // Between polls an idle instance may be packed; `Awake` unpacks it before each.
        let sleeper = self.sleepers.new_sleeper(config.pack_at_first_wait);
        // An instance lives in the term it was made in: after a lapse it never runs again.
        let term = self.run_until.term();
        store.epoch_deadline_callback(slices(sleeper.clone(), self.run_until.clone(), term));
        let instance = sleeper.clone();
        let run = async {
            match &program.entry {
                Entry::Command(pre) => {
                    let command = pre.instantiate_async(&mut store).await?;
                    instance.remember_image(&program.image);
                    on_running();
                    command.wasi_cli_run().call_run(&mut store).await
                }
                Entry::Proxy(pre) => {
                    let handler = pre.instantiate_async(&mut store).await?;
                    instance.remember_image(&program.image);
                    on_running();
                    proxy::serve(&mut store, &handler, &input, &output, &errors).await
                }
            }
        };
        let ticking = Ticking::new(
            self.ticker.clone(),
            self.run_until.clone(),
            term,
            Awake::new(sleeper, run),
        );
        let result = ticking.await;
        let exit = match result {
            Err(_) if store.data().memory.reached => Exit::MemoryLimit(memory_mb),
            Ok(Ok(())) => Exit::Clean,
            Ok(Err(())) => Exit::Code(1),
            Err(e) => match e.downcast_ref::<I32Exit>() {
                Some(I32Exit(0)) => Exit::Clean,
                Some(I32Exit(code)) => Exit::Code(*code),
                None => Exit::Trap(trap_message(&e)),
            },
        };
        if matches!(exit, Exit::Clean | Exit::Code(_)) {
            // Process exit closes files: a normal exit commits what is still open.
            store.data_mut().fs.commit_open_files().await;
        }
        store.data().fs.settle_output().await;
        if let Some(in_use) = &config.memory_in_use {
            in_use.store(0, Ordering::Relaxed);
        }
        exit
    }
}

const MIB: usize = 1 << 20;

/// The store limiter of one instance: its linear memory may not grow past `bytes`. Growing
/// past it is an error, which traps the guest at once (rather than `memory.grow` returning
/// -1, which Rust programs turn into an abort with a vaguer message), and `reached` records
/// that the trap was the limit's.
struct MemoryLimit {
    bytes: usize,
    reached: bool,
    /// The instance's memories' total size, kept as they grow.
    in_use: Option<Arc<AtomicUsize>>,
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.bytes {
            self.reached = true;
            wasmtime::bail!("memory would grow to {desired} bytes, past its limit");
        }
        if let Some(in_use) = &self.in_use {
            in_use.fetch_add(desired.saturating_sub(current), Ordering::Relaxed);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(true)
    }
}

/// The message of a trap, without wasmtime's multi-line backtrace.
fn trap_message(e: &wasmtime::Error) -> String {
    let text = format!("{e:#}");
    let first = text.lines().next().unwrap_or("unknown trap");
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(trap) if !first.contains(&trap.to_string()) => format!("{first}: {trap}"),
        _ => first.to_string(),
    }
}

/// The state of one instance's store.
pub struct Guest {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    hooks: HttpHooks,
    fs: FsState,
    memory: MemoryLimit,
}

impl WasiView for Guest {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for Guest {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            hooks: &mut self.hooks,
            table: &mut self.table,
            ctx: &mut self.http,
        }
    }
}

/// `wasi:io` bindings take the resource table alone.
struct HasIo;

impl HasData for HasIo {
    type Data<'a> = &'a mut ResourceTable;
}

/// Links every WASI 0.2 interface a Rust `wasm32-wasip2` program may import: wasmtime-wasi's
/// own for everything but the filesystem, ours for the filesystem (commit on close), and
/// `wasi:http`. Sockets are linked so that programs importing them start, but the context
/// denies every socket.
fn link(engine: &Engine) -> Result<Linker<Guest>> {
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
    use wasmtime_wasi::p2::bindings::{cli, clocks, random, sockets};
    use wasmtime_wasi::random::WasiRandom;
    use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView};
    use wasmtime_wasi_io::bindings::wasi::io;

    let mut linker = Linker::new(engine);
    let l = &mut linker;
    io::error::add_to_linker::<Guest, HasIo>(l, |g| &mut g.table)?;
    io::poll::add_to_linker::<Guest, HasIo>(l, |g| &mut g.table)?;
    io::streams::add_to_linker::<Guest, HasIo>(l, |g| &mut g.table)?;
    clocks::wall_clock::add_to_linker::<Guest, WasiClocks>(l, |g| g.clocks())?;
    clocks::monotonic_clock::add_to_linker::<Guest, WasiClocks>(l, |g| g.clocks())?;
    random::random::add_to_linker::<Guest, WasiRandom>(l, |g| g.wasi.random())?;
    random::insecure::add_to_linker::<Guest, WasiRandom>(l, |g| g.wasi.random())?;
    random::insecure_seed::add_to_linker::<Guest, WasiRandom>(l, |g| g.wasi.random())?;
    cli::exit::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    cli::environment::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    cli::stdin::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    cli::stdout::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    cli::stderr::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    cli::terminal_input::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    cli::terminal_output::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    cli::terminal_stdin::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    cli::terminal_stdout::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    cli::terminal_stderr::add_to_linker::<Guest, WasiCli>(l, |g| g.cli())?;
    sockets::tcp_create_socket::add_to_linker::<Guest, WasiSockets>(l, |g| g.sockets())?;
    sockets::instance_network::add_to_linker::<Guest, WasiSockets>(l, |g| g.sockets())?;
    sockets::network::add_to_linker::<Guest, WasiSockets>(l, &Default::default(), |g| g.sockets())?;
    sockets::ip_name_lookup::add_to_linker::<Guest, WasiSockets>(l, |g| g.sockets())?;
    sockets::tcp::add_to_linker::<Guest, WasiSockets>(l, |g| g.sockets())?;
    sockets::udp::add_to_linker::<Guest, WasiSockets>(l, |g| g.sockets())?;
    sockets::udp_create_socket::add_to_linker::<Guest, WasiSockets>(l, |g| g.sockets())?;
    wasi_fs::add_to_linker(l, |g| FsView {
        table: &mut g.table,
        state: &mut g.fs,
    })?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(l)?;
    Ok(linker)
}
