//! The processes the tests start beside a host: [`Process`] (dies on drop and with the test
//! binary), and [`PythonService`], a script run by the python of a virtual environment under
//! `target/` that prints its port once it listens and writes what it received as JSON lines.
//!
//! Boundary: a venv, a script and its arguments in; a port, the JSON lines it wrote and its
//! stderr out.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::repo;

/// How long a service may take to say its port (python importing its packages, on a busy
/// machine); past it the test fails with what the service wrote on stderr.
const START_PATIENCE: Duration = Duration::from_secs(30);

/// How often a wait looks again at a service's output.
const POLL: Duration = Duration::from_millis(20);

/// `target/<venv>/bin/python`, made by `scripts/<install>` (which `scripts/test` runs; run it by
/// hand for a single test binary); `needs` says what the tests need from it.
pub fn venv_python(venv: &str, install: &str, needs: &str) -> PathBuf {
    let python = repo().join("target").join(venv).join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/{install} ({needs} in target/{venv})",
        python.display()
    );
    python
}

/// A file of `tests/support/`.
pub fn support_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(name)
}

/// A running `tests/support/<script>`: it prints its port as its first line once it listens;
/// dropping it kills it and removes its folder.
pub struct PythonService {
    /// What the failures call it ("the OTLP receiver").
    what: &'static str,
    port: u16,
    /// Declared before `folder`, so that the service is killed before its files are removed.
    process: Process,
    /// `port` (its stdout), `stderr.log`, and the files it writes.
    folder: tempfile::TempDir,
}

impl PythonService {
    /// Starts `python script 0 ARGS...` with the arguments `args` makes from its folder (where
    /// it writes), and waits until it says its port.
    pub fn start(
        what: &'static str,
        python: &Path,
        script: &str,
        args: impl FnOnce(&Path) -> Vec<OsString>,
    ) -> PythonService {
        let folder = tempfile::tempdir().unwrap();
        let file = |name: &str| std::fs::File::create(folder.path().join(name)).unwrap();
        let mut command = Command::new(python);
        command
            .arg(support_file(script))
            .arg("0")
            .args(args(folder.path()))
            .stdin(Stdio::null())
            .stdout(file("port"))
            .stderr(file("stderr.log"));
        let process = Process::spawn(command)
            .unwrap_or_else(|e| panic!("{}: cannot start {what}: {e}", python.display()));
        let mut service = PythonService {
            what,
            port: 0,
            process,
            folder,
        };
        service.port = service.wait_port();
        service
    }

    /// The port the service prints as its first line, once it listens.
    fn wait_port(&self) -> u16 {
        let what = self.what;
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            let printed = std::fs::read_to_string(self.folder.path().join("port")).unwrap();
            if let Some((line, _)) = printed.split_once('\n') {
                return line
                    .trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("{what} printed {line:?}, not a port: {e}"));
            }
            let exited = self.process.exited();
            if exited || Instant::now() > deadline {
                panic!(
                    "{what} did not say its port ({}); its stderr:\n{}",
                    if exited { "it exited" } else { "timed out" },
                    self.stderr()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The values of the JSON lines the service wrote so far to `name` in its folder, in order.
    pub fn json_lines(&self, name: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.folder.path().join(name)).unwrap_or_default();
        // A line without its newline is still being written: it is read next time.
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        let what = self.what;
        complete
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("{what} wrote {line:?}, not JSON: {e}"))
            })
            .collect()
    }

    /// What the service wrote on stderr.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.folder.path().join("stderr.log")).unwrap_or_default()
    }
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
