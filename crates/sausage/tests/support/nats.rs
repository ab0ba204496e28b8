//! Real NATS servers with JetStream for the tests of a world spread over several hosts
//! (DESIGN §16, §20): `scripts/install-nats` puts the binary in `target/nats-venv`. A [`Nats`] is
//! one server; a [`NatsCluster`] is three joined by cluster routes, whose nodes a test can kill
//! and restart. Each runs on free loopback ports with its own store and is stopped when dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http::try_request;
use super::partition::Proxy;
use super::repo;

/// How long a server (or a cluster, with its JetStream meta leader elected) may take to say it
/// is healthy.
const START_PATIENCE: Duration = Duration::from_secs(30);

pub struct Nats {
    child: Child,
    /// The client port: `nats://127.0.0.1:<port>`.
    pub port: u16,
    /// The HTTP monitoring port (`/healthz`, `/jsz`).
    pub monitor: u16,
    /// Its store and its log.
    _folder: tempfile::TempDir,
}

impl Nats {
    /// Starts a server with JetStream and waits until it says it is healthy.
    pub fn start() -> Nats {
        let folder = tempfile::tempdir().unwrap();
        let store = folder.path().join("store");
        let ports = free_ports(2);
        let (port, monitor) = (ports[0], ports[1]);
        let name = format!("test-{port}");
        let child = spawn_server(port, monitor, &store, &name, &[], SYNC_EVERY_WRITE);
        let nats = Nats {
            child,
            port,
            monitor,
            _folder: folder,
        };
        wait_healthy(&[(monitor, &store)], "/healthz?js-enabled-only=true");
        nats
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Where it stores JetStream's streams on disk.
    pub fn store(&self) -> std::path::PathBuf {
        self._folder.path().join("store")
    }

    /// Whether the server answers its health check with JetStream on.
    pub fn healthy(&self) -> bool {
        healthy(self.monitor, "/healthz?js-enabled-only=true")
    }

    /// The server's JetStream report (`/jsz`).
    pub fn jetstream(&self) -> Value {
        monitoring(self.monitor, "/jsz")
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        // The server is this test's own: killing it cannot hurt anyone else.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three NATS servers with JetStream joined into one cluster by routes, as the README shows
/// one: each has its own client, monitoring and route port and its own store folder. A node
/// killed with [`NatsCluster::kill`] comes back with [`NatsCluster::restart`], on the same ports
/// and store, and catches up from the others.
pub struct NatsCluster {
    nodes: Vec<Node>,
    /// With [`NatsCluster::start_partitionable`], the way from each node to each other node's
    /// route port: `links[n][m]` is the proxy node `n` dials to reach node `m`.
    links: Option<Vec<Vec<Option<Proxy>>>>,
    /// Whether its nodes sync every write ([`SYNC_EVERY_WRITE`]).
    sync: bool,
    /// Every node's store and log.
    _stores: tempfile::TempDir,
}

struct Node {
    name: String,
    port: u16,
    monitor: u16,
    route: u16,
    store: PathBuf,
    /// `None` while killed.
    child: Option<Child>,
}

impl NatsCluster {
    /// The number of nodes.
    pub const SIZE: usize = 3;

    /// Starts the three nodes, syncing every write, and waits until every one is healthy:
    /// routes up, a JetStream meta leader elected and known to all.
    pub fn start() -> NatsCluster {
        NatsCluster::start_with(true)
    }

    /// [`NatsCluster::start`] with JetStream's default sync (every two minutes) unless `sync`.
    pub fn start_with(sync: bool) -> NatsCluster {
        NatsCluster::make(sync, false)
    }

    /// [`NatsCluster::start`] with every route between two nodes through a proxy of the test's,
    /// so that [`NatsCluster::cut_off`] can cut one node off from the other two while everything
    /// keeps running. Each node advertises a route address nobody listens on, so the others
    /// never dial it directly, around the proxies, when they learn of it from a third.
    pub fn start_partitionable() -> NatsCluster {
        NatsCluster::make(true, true)
    }

    fn make(sync: bool, partitionable: bool) -> NatsCluster {
        let stores = tempfile::tempdir().unwrap();
        // Each node's three ports, and the ports of the proxies between nodes: chosen at once,
        // so that no proxy takes a port a node is about to listen on.
        let proxies = if partitionable {
            Self::SIZE * (Self::SIZE - 1)
        } else {
            0
        };
        let mut ports = free_ports(3 * Self::SIZE + proxies).into_iter();
        let mut port = || ports.next().expect("a port for each");
        let nodes: Vec<Node> = (0..Self::SIZE)
            .map(|n| Node {
                name: format!("node-{n}"),
                port: port(),
                monitor: port(),
                route: port(),
                store: stores.path().join(format!("node-{n}")),
                child: None,
            })
            .collect();
        let links = partitionable.then(|| {
            (0..Self::SIZE)
                .map(|n| {
                    (0..Self::SIZE)
                        .map(|m| {
                            let route = format!("127.0.0.1:{}", nodes[m].route);
                            (n != m).then(|| Proxy::start_at(port(), &route))
                        })
                        .collect()
                })
                .collect()
        });
        let mut cluster = NatsCluster {
            nodes,
            links,
            sync,
            _stores: stores,
        };
        for n in 0..Self::SIZE {
            cluster.spawn(n);
        }
        cluster.wait_healthy();
        cluster
    }

    /// Every node's client URL, separated by commas, starting at node `first`: what a host
    /// given `--cluster` with it tries first.
    pub fn urls_from(&self, first: usize) -> String {
        (0..Self::SIZE)
            .map(|i| self.url((first + i) % Self::SIZE))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every node's client URL, separated by commas, in node order.
    pub fn urls(&self) -> String {
        self.urls_from(0)
    }

    pub fn url(&self, n: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[n].port)
    }

    /// Kills node `n` at once (`SIGKILL`): its clients lose their connection mid-flight.
    pub fn kill(&mut self, n: usize) {
        let mut child = self.nodes[n].child.take().expect("the node runs");
        // The server is this test's own: killing it cannot hurt anyone else.
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts node `n` again with its store and waits until it is healthy, which it says only
    /// once it has caught up with the others' streams.
    pub fn restart(&mut self, n: usize) {
        assert!(self.nodes[n].child.is_none(), "node {n} runs already");
        self.spawn(n);
        let node = &self.nodes[n];
        wait_healthy(&[(node.monitor, &node.store)], "/healthz");
    }

    /// Starts every killed node again with its store, all at once (one alone has no majority to
    /// elect a leader with), and waits until each is healthy.
    pub fn restart_all(&mut self) {
        for n in 0..Self::SIZE {
            if self.nodes[n].child.is_none() {
                self.spawn(n);
            }
        }
        self.wait_healthy();
    }

    /// A monitoring report of node `n`: `/jsz?streams=true`, `/connz`, ….
    pub fn monitoring(&self, n: usize, path: &str) -> Value {
        monitoring(self.nodes[n].monitor, path)
    }

    /// Cuts node `n` off from the other two, every route between them stalled (every byte
    /// held) or severed (every connection reset, new ones refused), until
    /// [`NatsCluster::heal`]; its clients stay connected to it.
    pub fn cut_off(&self, n: usize, sever: bool) {
        for proxy in self.links_of(n) {
            match sever {
                true => proxy.sever(),
                false => proxy.stall(),
            }
        }
    }

    /// Joins node `n` to the other two again.
    pub fn heal(&self, n: usize) {
        self.links_of(n).for_each(Proxy::heal);
    }

    /// The proxies between node `n` and the others, both ways.
    fn links_of(&self, n: usize) -> impl Iterator<Item = &Proxy> {
        let links = self
            .links
            .as_ref()
            .expect("a cluster started partitionable");
        (0..Self::SIZE)
            .filter(move |&m| m != n)
            .flat_map(move |m| [links[n][m].as_ref(), links[m][n].as_ref()])
            .flatten()
    }

    fn spawn(&mut self, n: usize) {
        let routes: Vec<String> = (0..Self::SIZE)
            .filter(|&m| m != n)
            .map(|m| match &self.links {
                Some(links) => links[n][m].as_ref().expect("a link to another node").url(),
                None => format!("nats://127.0.0.1:{}", self.nodes[m].route),
            })
            .collect();
        let node = &self.nodes[n];
        let mut cluster = vec![
            "--cluster_name".to_string(),
            "sausage-test".into(),
            "--cluster".into(),
            format!("nats://127.0.0.1:{}", node.route),
            "--routes".into(),
            routes.join(","),
        ];
        if self.links.is_some() {
            cluster.extend(["--cluster_advertise".into(), NOBODY.into()]);
        }
        let cluster: Vec<&str> = cluster.iter().map(String::as_str).collect();
        let config = if self.sync { SYNC_EVERY_WRITE } else { "" };
        let child = spawn_server(
            node.port,
            node.monitor,
            &node.store,
            &node.name,
            &cluster,
            config,
        );
        self.nodes[n].child = Some(child);
    }

    fn wait_healthy(&self) {
        let servers: Vec<(u16, &Path)> = self
            .nodes
            .iter()
            .map(|n| (n.monitor, n.store.as_path()))
            .collect();
        wait_healthy(&servers, "/healthz");
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                // The servers are this test's own: killing them cannot hurt anyone else.
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// The route address a partitionable cluster's nodes advertise: port 1 of loopback, where
/// nothing listens, so a node dialling it fails at once.
const NOBODY: &str = "127.0.0.1:1";

/// The configuration every test server runs with, as the README's do: JetStream syncs every
/// write to disk before it acknowledges it (its default syncs every two minutes, and loses
/// acknowledged writes when every node dies at once).
pub const SYNC_EVERY_WRITE: &str = "jetstream {\n  sync_interval: always\n}\n";

/// Starts `nats-server` with JetStream on loopback ports, its store in `store`, its
/// configuration (`config`, such as [`SYNC_EVERY_WRITE`]) and its log beside it ([`log_of`]).
fn spawn_server(
    port: u16,
    monitor: u16,
    store: &Path,
    name: &str,
    extra: &[&str],
    config: &str,
) -> Child {
    let binary = server_binary();
    std::fs::create_dir_all(store).unwrap();
    let log = std::fs::File::create(log_of(store)).unwrap();
    let written = config;
    let config = store.with_extension("conf");
    std::fs::write(&config, written).unwrap();
    Command::new(&binary)
        .arg("-c")
        .arg(&config)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .args(["-m", &monitor.to_string()])
        .args(["-js", "-sd"])
        .arg(store)
        .args(["--server_name", name])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", binary.display()))
}

/// The file a server's output goes to: beside its store.
fn log_of(store: &Path) -> PathBuf {
    store.with_extension("log")
}

/// Waits until every server, monitored on its port with the store given, answers `check` with
/// 200 (`/healthz` says 503 until JetStream has a meta leader and its streams are current); the
/// failure shows the server's log.
fn wait_healthy(servers: &[(u16, &Path)], check: &str) {
    let deadline = Instant::now() + START_PATIENCE;
    for &(monitor, store) in servers {
        while !healthy(monitor, check) {
            if Instant::now() >= deadline {
                let log = std::fs::read_to_string(log_of(store)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "the nats-server monitored on port {monitor} did not become healthy \
                     ({check}); the end of its log:\n{}",
                    tail.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn healthy(monitor: u16, check: &str) -> bool {
    try_request(&format!("127.0.0.1:{monitor}"), "GET", check, &[], b"")
        .is_ok_and(|r| r.status == 200)
}

fn monitoring(monitor: u16, path: &str) -> Value {
    try_request(&format!("127.0.0.1:{monitor}"), "GET", path, &[], b"")
        .unwrap_or_else(|e| panic!("monitoring port {monitor}, {path}: {e}"))
        .json()
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

/// `count` different free loopback ports: each is held until all are found.
fn free_ports(count: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|listener| listener.local_addr().unwrap().port())
        .collect()
}
