//! A real OTLP/HTTP trace receiver for the tests of traces (DESIGN §22): `otlp_receiver.py`
//! beside this file, run by the python of `target/otel-venv` (`scripts/install-observability`
//! puts the official protobuf definitions there), on a free loopback port.
//!
//! Boundary: [`Otlp::endpoint`] in (what a host is given as `--otlp`), the spans it exported out
//! as JSON values ([`Otlp::spans`]), one per span in the order received, with hex ids. The
//! receiver dies on drop and with the test binary ([`Process`]).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::repo;

/// How long the receiver may take to say its port (python importing protobuf, on a busy
/// machine); past it the test fails with what the receiver wrote on stderr.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// How often a wait looks again at what was received.
const POLL: Duration = Duration::from_millis(100);

/// A running receiver; dropping it kills it and removes what it received.
pub struct Otlp {
    port: u16,
    /// Declared before `folder`, so that the receiver is killed before its files are removed.
    process: Process,
    /// `spans.jsonl` (what was received), `port` (its stdout) and `stderr.log`.
    folder: tempfile::TempDir,
}

impl Otlp {
    /// Starts the receiver and waits until it listens.
    pub fn start() -> Otlp {
        let python = python();
        let folder = tempfile::tempdir().unwrap();
        let file = |name: &str| std::fs::File::create(folder.path().join(name)).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/otlp_receiver.py");
        let mut command = Command::new(&python);
        command
            .arg(&script)
            .arg("0")
            .arg(folder.path().join("spans.jsonl"))
            .stdin(Stdio::null())
            .stdout(file("port"))
            .stderr(file("stderr.log"));
        let process = Process::spawn(command)
            .unwrap_or_else(|e| panic!("{}: cannot start the receiver: {e}", python.display()));
        let mut otlp = Otlp {
            port: 0,
            process,
            folder,
        };
        otlp.port = otlp.wait_port();
        otlp
    }

    /// The port the receiver prints as its first line, once it listens.
    fn wait_port(&self) -> u16 {
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            let printed = std::fs::read_to_string(self.folder.path().join("port")).unwrap();
            if let Some((line, _)) = printed.split_once('\n') {
                return line.trim().parse().unwrap_or_else(|e| {
                    panic!("the OTLP receiver printed {line:?}, not a port: {e}")
                });
            }
            let exited = self.process.exited();
            if exited || Instant::now() > deadline {
                panic!(
                    "the OTLP receiver did not say its port ({}); its stderr:\n{}",
                    if exited { "it exited" } else { "timed out" },
                    self.stderr()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// `http://127.0.0.1:PORT`: the base URL, to which an exporter adds `/v1/traces`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far, in the order received: objects with `trace_id`, `span_id`
    /// and `parent_span_id` (lowercase hex; the parent `""` for a root), `name`, `kind`,
    /// `start_unix_nano`, `end_unix_nano`, `attributes` (an object of plain JSON values),
    /// `status_code`, `status_message`, `resource` (an object) and `scope` (its name).
    pub fn spans(&self) -> Vec<Value> {
        let text =
            std::fs::read_to_string(self.folder.path().join("spans.jsonl")).unwrap_or_default();
        // A line without its newline is still being written: it is read next time.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("the OTLP receiver wrote {line:?}, not JSON: {e}"))
            })
            .collect()
    }

    /// Waits until `check` holds for the spans received, or fails after `patience` showing
    /// them and the receiver's stderr (where it says which requests it could not decode).
    pub fn wait_for(
        &self,
        what: &str,
        patience: Duration,
        check: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + patience;
        loop {
            let spans = self.spans();
            if check(&spans) {
                return spans;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}; the spans received:\n{}\nthe receiver's \
                     stderr:\n{}",
                    spans
                        .iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join("\n"),
                    self.stderr()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// What the receiver wrote on stderr: a line for each request it refused as undecodable.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.folder.path().join("stderr.log")).unwrap_or_default()
    }
}

/// `target/otel-venv/bin/python`, made by `scripts/install-observability` (which `scripts/test`
/// runs; run it by hand for a single test binary).
fn python() -> PathBuf {
    let python = repo().join("target/otel-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-observability (the trace tests need \
         opentelemetry-proto in target/otel-venv)",
        python.display()
    );
    python
}

/// A service process of a test's own (the receiver, Prometheus) that dies on drop and also with
/// the test binary, as synapse.rs keeps Synapse: the child's death signal (`PR_SET_PDEATHSIG`)
/// is tied to the thread that spawned it, so a keeper thread spawns it and lives as long as it
/// does, however long the test thread that started it lives.
pub struct Process {
    pid: i32,
    /// Spawned the child and waits on it; finished once the child has exited.
    keeper: Option<JoinHandle<()>>,
}

impl Process {
    /// Spawns `command` on a keeper thread; the error is the spawn's (a missing binary).
    pub fn spawn(mut command: Command) -> io::Result<Process> {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent; it only asks
        // the kernel to kill the child when its parent thread ends.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (started, result) = std::sync::mpsc::channel();
        let keeper = std::thread::spawn(move || match command.spawn() {
            Ok(mut child) => {
                // The receiving end waits just below for this one message.
                started.send(Ok(child.id() as i32)).unwrap();
                let _ = child.wait();
            }
            Err(e) => started.send(Err(e)).unwrap(),
        });
        let pid = result
            .recv()
            .expect("the keeper sends the spawn's result before it ends")?;
        Ok(Process {
            pid,
            keeper: Some(keeper),
        })
    }

    /// Whether the child has exited (and been reaped).
    pub fn exited(&self) -> bool {
        self.keeper.as_ref().is_none_or(|k| k.is_finished())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.exited() {
            // SAFETY: kill(2) touches no memory; the pid is our child's, not yet reaped while
            // the keeper waits on it, so it cannot name another process.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
        if let Some(keeper) = self.keeper.take() {
            // The keeper only waits on the child, which the kill ends: it cannot panic.
            let _ = keeper.join();
        }
    }
}
