//! A real NATS server with JetStream for the tests of a world spread over several hosts
//! (DESIGN §16): `scripts/install-nats` puts the binary in `target/nats-venv`; each [`Nats`]
//! runs its own on free loopback ports with its own store, and is stopped when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http::try_request;
use super::repo;

/// How long a server may take to answer its health check.
const START_PATIENCE: Duration = Duration::from_secs(20);

pub struct Nats {
    child: Child,
    /// The client port: `nats://127.0.0.1:<port>`.
    pub port: u16,
    /// The HTTP monitoring port (`/healthz`, `/jsz`).
    pub monitor: u16,
    _store: tempfile::TempDir,
}

impl Nats {
    /// Starts a server with JetStream and waits until it says it is healthy.
    pub fn start() -> Nats {
        let binary = server_binary();
        let store = tempfile::tempdir().unwrap();
        let (port, monitor) = (free_port(), free_port());
        let child = Command::new(&binary)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-m",
                &monitor.to_string(),
            ])
            .args(["-js", "-sd"])
            .arg(store.path())
            .args(["--server_name", &format!("test-{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
        let nats = Nats {
            child,
            port,
            monitor,
            _store: store,
        };
        let deadline = Instant::now() + START_PATIENCE;
        while !nats.healthy() {
            assert!(
                Instant::now() < deadline,
                "nats-server on port {port} did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        nats
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Whether the server answers its health check with JetStream on.
    pub fn healthy(&self) -> bool {
        let addr = format!("127.0.0.1:{}", self.monitor);
        try_request(&addr, "GET", "/healthz?js-enabled-only=true", &[], b"")
            .is_ok_and(|r| r.status == 200)
    }

    /// The server's JetStream report (`/jsz`).
    pub fn jetstream(&self) -> Value {
        let addr = format!("127.0.0.1:{}", self.monitor);
        try_request(&addr, "GET", "/jsz", &[], b"").unwrap().json()
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        // The server is this test's own: killing it cannot hurt anyone else.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `target/nats-venv/bin/nats-server`, installed by `scripts/install-nats` (which `scripts/test`
/// runs; run it by hand for a single test binary).
fn server_binary() -> PathBuf {
    let binary = repo().join("target/nats-venv/bin/nats-server");
    assert!(
        binary.exists(),
        "{} is missing: run scripts/install-nats",
        binary.display()
    );
    binary
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
