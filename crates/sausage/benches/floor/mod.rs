//! The floor under the world bench's round trip and flood: the same `pingpong` guests joined by
//! a broker that only passes lines on. No journal, no mailbox limits or settling, no window, no
//! supervisor: what is left is the cost of running the guests and of one JSON parse and one
//! envelope a message. The guests run on Sausage's own runtime (its engine, WASI, filesystem
//! and scheduler), or on wasmtime alone with its default engine (guard pages rather than bounds
//! checks) and its own WASI. The world bench prints both beside the whole host's figures, so
//! that the broker's share and the runtime's are measured rather than guessed (docs/profile.md).

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::Notify;

use sausage_core::runtime::stdio::{BoxFuture, GuestInput, GuestOutput, Stdin, Stdout};
use sausage_core::runtime::{InstanceConfig, Runtime};
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::p2::bindings::CommandPre;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// Lines waiting in a guest's stdin before its senders wait: the world's mailbox capacity.
const CAPACITY: usize = sausage_core::broker::mailbox::MAILBOX_CAPACITY;

/// How much a guest may write at once while nothing blocks: the world's stdout chunk.
const WRITE_CHUNK: usize = sausage_core::broker::stdio::WRITE_CHUNK;

/// How long the bench waits for an answer from a guest.
const PATIENCE: Duration = Duration::from_secs(300);

/// What runs the guests.
#[derive(Clone, Copy)]
pub enum On {
    /// Sausage's runtime, as a world runs them.
    Sausage,
    /// wasmtime and wasmtime-wasi alone, with wasmtime's default engine.
    Wasmtime,
}

/// Two or more guests on one thread, and the lines the bench gets back.
pub struct Floor {
    broker: Arc<Broker>,
    /// Lines written `"to": "bench"`, as envelopes; the broker sends, the bench receives.
    answers: mpsc::Receiver<String>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Floor {
    /// Starts `pingpong.wasm` once for every id, on a thread of their own.
    pub fn start(wasm: &Path, ids: &[&str], on: On) -> Floor {
        let (to_bench, answers) = mpsc::channel();
        let broker = Arc::new(Broker {
            stdins: ids
                .iter()
                .map(|id| (id.to_string(), Arc::new(Pipe::default())))
                .collect(),
            to_bench: Mutex::new(to_bench),
            ids: AtomicU64::new(0),
        });
        let wasm = std::fs::read(wasm).expect("the actor is built");
        let guests: Vec<Guest> = match on {
            On::Sausage => {
                let runtime = Runtime::new(None).expect("an engine");
                let program = runtime.compile(&wasm).expect("pingpong compiles");
                ids.iter()
                    .map(|id| Guest::Sausage(runtime.clone(), program.clone(), id.to_string()))
                    .collect()
            }
            On::Wasmtime => {
                let mut config = Config::new();
                config.wasm_component_model(true);
                let engine = Engine::new(&config).expect("an engine");
                let mut linker = Linker::new(&engine);
                wasmtime_wasi::p2::add_to_linker_async(&mut linker).expect("WASI links");
                let component = Component::new(&engine, &wasm).expect("pingpong compiles");
                let pre = linker.instantiate_pre(&component).expect("pingpong links");
                let pre = CommandPre::new(pre).expect("pingpong is a command");
                ids.iter()
                    .map(|id| Guest::Wasmtime(engine.clone(), pre.clone(), id.to_string()))
                    .collect()
            }
        };
        let thread = {
            let broker = broker.clone();
            std::thread::spawn(move || {
                let scheduler = sausage_core::scheduler().expect("a scheduler");
                scheduler.block_on(async {
                    let mut running = tokio::task::JoinSet::new();
                    for guest in guests {
                        running.spawn(guest.run(broker.clone()));
                    }
                    while let Some(ended) = running.join_next().await {
                        ended.expect("a guest's task ends");
                    }
                });
            })
        };
        Floor {
            broker,
            answers,
            thread: Some(thread),
        }
    }

    /// Puts `body` in `to`'s stdin as a message from `bench`.
    pub fn tell(&self, to: &str, body: Value) {
        let id = self.broker.ids.fetch_add(1, Ordering::Relaxed);
        let line = format!(r#"{{"id":"b-{id}","from":"bench","body":{body}}}"#);
        let pipe = &self.broker.stdins[to];
        pipe.lock().lines.push_back(Bytes::from(line + "\n"));
        pipe.arrived.notify_one();
    }

    /// The body of the next answer whose type is `kind`; others are skipped.
    pub fn wait(&self, kind: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .answers
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {kind} from the floor's guests"));
            let envelope: Value = serde_json::from_str(&line).expect("an envelope");
            if envelope["body"]["type"] == kind {
                return envelope["body"].clone();
            }
        }
    }
}

impl Drop for Floor {
    /// Ends every guest's stdin (they exit at EOF) and waits for them.
    fn drop(&mut self) {
        for pipe in self.broker.stdins.values() {
            pipe.lock().closed = true;
            pipe.arrived.notify_one();
        }
        if let Some(thread) = self.thread.take() {
            let ended = thread.join();
            if !std::thread::panicking() {
                ended.expect("the floor's guests end cleanly");
            }
        }
    }
}

/// One guest to run, and on what.
enum Guest {
    Sausage(Arc<Runtime>, sausage_core::runtime::Program, String),
    Wasmtime(Engine, CommandPre<Bare>, String),
}

/// A guest's state on wasmtime alone: WASI's context and its resources.
struct Bare {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl Guest {
    /// Runs the guest to its end (EOF on its stdin), which must be clean.
    async fn run(self, broker: Arc<Broker>) {
        match self {
            Guest::Sausage(runtime, program, id) => {
                let config = InstanceConfig {
                    env: vec![("SAUSAGE_ACTOR".into(), id.clone())],
                    mounts: Vec::new(),
                    stdin: Arc::new(Input(broker.stdins[&id].clone())),
                    stdout: InstanceConfig::output(Output::new(&id, &broker)),
                    stderr: InstanceConfig::output(Stderr),
                    network: Default::default(),
                    replica: None,
                    replay: None,
                    memory_in_use: None,
                    pack_at_first_wait: false,
                };
                let exit = runtime.run(&program, config).await;
                assert!(exit.is_clean(), "{id} {exit}");
            }
            Guest::Wasmtime(engine, pre, id) => {
                let wasi = WasiCtxBuilder::new()
                    .stdin(Stdin(Arc::new(Input(broker.stdins[&id].clone()))))
                    .stdout(Stdout::new(Output::new(&id, &broker)))
                    .stderr(Stdout::new(Stderr))
                    .env("SAUSAGE_ACTOR", &id)
                    .build();
                let table = ResourceTable::new();
                let mut store = Store::new(&engine, Bare { wasi, table });
                let command = pre
                    .instantiate_async(&mut store)
                    .await
                    .expect("instantiates");
                let ran = command.wasi_cli_run().call_run(&mut store).await;
                assert!(matches!(ran, Ok(Ok(()))), "{id} did not end cleanly");
            }
        }
    }
}

/// The whole broker: a stdin per guest, and a counter for ids.
struct Broker {
    stdins: HashMap<String, Arc<Pipe>>,
    to_bench: Mutex<mpsc::Sender<String>>,
    ids: AtomicU64,
}

/// A guest's stdin: whole lines, at most [`CAPACITY`] of them waiting.
#[derive(Default)]
struct Pipe {
    inner: Mutex<Lines>,
    /// Woken when a line arrives or the pipe closes; the reader waits on it.
    arrived: Notify,
    /// Woken when the reader takes a line; blocked writers wait on it.
    space: Notify,
}

#[derive(Default)]
struct Lines {
    lines: VecDeque<Bytes>,
    /// What is left of the line being read.
    partial: Option<Bytes>,
    closed: bool,
}

impl Pipe {
    fn lock(&self) -> std::sync::MutexGuard<'_, Lines> {
        self.inner.lock().expect("no holder panics")
    }
}

impl Lines {
    /// Whether the reader has a line or the end of its input to read.
    fn readable(&self) -> bool {
        self.partial.is_some() || !self.lines.is_empty() || self.closed
    }
}

/// The reading end of a [`Pipe`], one line a read as in the world.
struct Input(Arc<Pipe>);

impl GuestInput for Input {
    fn read(&self, max: usize) -> Option<Bytes> {
        let mut inner = self.0.lock();
        if inner.partial.is_none() {
            inner.partial = inner.lines.pop_front();
            if inner.partial.is_some() {
                self.0.space.notify_waiters();
            }
        }
        let Some(partial) = inner.partial.as_mut() else {
            return (!inner.closed).then(Bytes::new);
        };
        let chunk = partial.split_to(max.min(partial.len()));
        if partial.is_empty() {
            inner.partial = None;
        }
        Some(chunk)
    }

    fn ready_now(&self) -> bool {
        self.0.lock().readable()
    }

    fn readable(&self) -> BoxFuture<'_> {
        Box::pin(async move {
            loop {
                let arrived = self.0.arrived.notified();
                if self.0.lock().readable() {
                    return;
                }
                arrived.await;
            }
        })
    }
}

/// A guest's stdout: each line parsed once and passed on as an envelope.
struct Output {
    from: String,
    broker: Arc<Broker>,
    line: Vec<u8>,
    /// Envelopes waiting for room in a full stdin, oldest first; while any waits, the guest
    /// may write nothing.
    blocked: VecDeque<(Arc<Pipe>, Bytes)>,
}

/// What the floor reads of a line a guest writes.
#[derive(Deserialize)]
struct Outgoing<'a> {
    #[serde(borrow)]
    to: Option<&'a str>,
    #[serde(borrow)]
    id: Option<&'a str>,
    #[serde(borrow)]
    reply_to: Option<&'a str>,
    #[serde(borrow)]
    body: &'a RawValue,
}

impl Output {
    fn new(from: &str, broker: &Arc<Broker>) -> Output {
        Output {
            from: from.to_string(),
            broker: broker.clone(),
            line: Vec::new(),
            blocked: VecDeque::new(),
        }
    }

    /// Makes the envelope of one line and passes it on (or keeps it while its stdin is full).
    fn route(&mut self, line: &[u8]) {
        let out: Outgoing = serde_json::from_slice(line).expect("pingpong writes messages");
        let mut envelope = Vec::with_capacity(line.len() + 32);
        envelope.extend_from_slice(b"{\"id\":");
        let id = match out.id {
            Some(own) => format!("{}/{own}", self.from),
            None => format!("m-{}", self.broker.ids.fetch_add(1, Ordering::Relaxed)),
        };
        serde_json::to_writer(&mut envelope, &id).expect("a string serializes");
        envelope.extend_from_slice(b",\"from\":");
        serde_json::to_writer(&mut envelope, &self.from).expect("a string serializes");
        if let Some(reply_to) = out.reply_to {
            envelope.extend_from_slice(b",\"reply_to\":");
            serde_json::to_writer(&mut envelope, reply_to).expect("a string serializes");
        }
        envelope.extend_from_slice(b",\"body\":");
        envelope.extend_from_slice(out.body.get().as_bytes());
        envelope.extend_from_slice(b"}\n");
        let to = out.to.expect("pingpong names its recipients");
        if to == "bench" {
            let line = String::from_utf8(envelope).expect("JSON is UTF-8");
            // The bench may have stopped listening; then nobody wants the answer.
            let _ = self
                .broker
                .to_bench
                .lock()
                .expect("no holder panics")
                .send(line);
            return;
        }
        let pipe = self.broker.stdins[to].clone();
        self.blocked.push_back((pipe, Bytes::from(envelope)));
        self.pass_on();
    }

    /// Moves blocked envelopes into their stdins while there is room, in order.
    fn pass_on(&mut self) {
        while let Some((pipe, envelope)) = self.blocked.pop_front() {
            let mut inner = pipe.lock();
            if inner.lines.len() >= CAPACITY {
                drop(inner);
                self.blocked.push_front((pipe, envelope));
                return;
            }
            inner.lines.push_back(envelope);
            drop(inner);
            pipe.arrived.notify_one();
        }
    }
}

impl GuestOutput for Output {
    fn capacity(&mut self) -> usize {
        self.pass_on();
        if self.blocked.is_empty() {
            WRITE_CHUNK
        } else {
            0
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let line = match self.line.is_empty() {
                true => rest[..end].to_vec(),
                false => {
                    self.line.extend_from_slice(&rest[..end]);
                    std::mem::take(&mut self.line)
                }
            };
            self.route(&line);
            rest = &rest[end + 1..];
        }
        self.line.extend_from_slice(rest);
    }

    fn writable(&mut self) -> BoxFuture<'_> {
        Box::pin(async move {
            loop {
                let Some((pipe, _)) = self.blocked.front() else {
                    return;
                };
                let pipe = pipe.clone();
                let space = pipe.space.notified();
                self.pass_on();
                if self.blocked.is_empty() {
                    return;
                }
                space.await;
            }
        })
    }
}

/// Stderr goes nowhere: pingpong logs only when something is wrong, and the bench's figures
/// would show it.
struct Stderr;

impl GuestOutput for Stderr {
    fn capacity(&mut self) -> usize {
        WRITE_CHUNK
    }

    fn write(&mut self, _bytes: &[u8]) {}

    fn writable(&mut self) -> BoxFuture<'_> {
        Box::pin(async {})
    }
}
