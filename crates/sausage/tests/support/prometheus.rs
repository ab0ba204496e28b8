//! A real Prometheus scraping a host's `/metrics` with a bearer token, for the tests of metrics
//! (DESIGN §22): Debian's `prometheus` (`scripts/install-observability` installs it), its
//! configuration and store in a temporary folder, on a free loopback port.
//!
//! Boundary: a target (`host:port`) and its token in; PromQL answers out ([`Prometheus::query`]),
//! and the scrape's health ([`Prometheus::targets`]) for failures. It dies on drop and with the
//! test binary. Prometheus applies a new target only after its discovery's 5 s throttle, so the
//! first samples come some 6 s after the start: wait for them, never sleep.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http::{self, try_request};
use super::service::Process;
use super::synapse::encode;

/// How long Prometheus may take to say it is ready (its store opened, its web API up).
const START_PATIENCE: Duration = Duration::from_secs(30);

/// How often Prometheus scrapes the target (and evaluates): the delay a test sees between a
/// counter changing and the change showing in a query, past the first samples.
const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);

/// How often a wait asks Prometheus again.
const POLL: Duration = Duration::from_millis(250);

/// A running Prometheus; dropping it kills it and removes its store.
pub struct Prometheus {
    /// `127.0.0.1:PORT`, its web API.
    pub addr: String,
    /// Declared before `folder`, so that Prometheus is killed before its store is removed.
    process: Process,
    /// `prometheus.yml`, `data/` (the store) and `prometheus.log`.
    folder: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `http://{target}/metrics` every second as job `sausage`, with
    /// `Authorization: Bearer {bearer_token}`, and waits until it is ready.
    pub fn start(target: &str, bearer_token: &str) -> Prometheus {
        let folder = tempfile::tempdir().unwrap();
        let config = folder.path().join("prometheus.yml");
        let interval = format!("{}s", SCRAPE_INTERVAL.as_secs());
        // JSON is YAML: serde_json quotes the token and the target as YAML reads them.
        let quoted = |text: &str| Value::from(text).to_string();
        let yaml = format!(
            r#"global:
  scrape_interval: {interval}
  evaluation_interval: {interval}
scrape_configs:
  - job_name: sausage
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials: {token}
    static_configs:
      - targets: [{target}]
"#,
            token = quoted(bearer_token),
            target = quoted(target),
        );
        std::fs::write(&config, yaml).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(folder.path().join("prometheus.log")).unwrap();
        let mut command = Command::new("prometheus");
        command
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                folder.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let process = Process::spawn(command).unwrap_or_else(|e| {
            panic!("prometheus cannot start ({e}): run scripts/install-observability")
        });
        let prometheus = Prometheus {
            addr,
            process,
            folder,
        };
        prometheus.wait_ready();
        prometheus
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            let ready =
                try_request(&self.addr, "GET", "/-/ready", &[], b"").is_ok_and(|r| r.status == 200);
            if ready {
                return;
            }
            let exited = self.process.exited();
            if exited || Instant::now() > deadline {
                panic!(
                    "prometheus did not become ready on {} ({}); its log:\n{}",
                    self.addr,
                    if exited { "it exited" } else { "timed out" },
                    self.log()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// The result of an instant query (`/api/v1/query`): for a vector, an array of
    /// `{"metric": {labels}, "value": [time, "number"]}`, empty while nothing matches. A query
    /// Prometheus refuses (bad PromQL) fails the test with its error.
    pub fn query(&self, promql: &str) -> Value {
        self.query_data(promql)["result"].take()
    }

    /// The `data` of a query's answer: `resultType` and `result`.
    fn query_data(&self, promql: &str) -> Value {
        let path = format!("/api/v1/query?query={}", encode(promql));
        let mut answer = http::request(&self.addr, "GET", &path, &[], b"").json();
        assert!(
            answer["status"] == "success",
            "prometheus refused the query {promql}: {}",
            answer["error"]
        );
        answer["data"].take()
    }

    /// Waits until `check` holds for the samples of a query whose result is a vector (as
    /// [`Prometheus::query`] gives them), or fails after `patience` with the last samples and
    /// the scrape's health.
    pub fn wait_for_series(
        &self,
        promql: &str,
        patience: Duration,
        check: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + patience;
        loop {
            let mut data = self.query_data(promql);
            assert_eq!(
                data["resultType"], "vector",
                "{promql} is not an instant vector: {data}"
            );
            let Value::Array(samples) = data["result"].take() else {
                panic!("prometheus answered {promql} with a vector that is not an array");
            };
            if check(&samples) {
                return samples;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {promql}; its last samples: {}\nthe scrapes: {}",
                    Value::from(samples),
                    self.scrapes()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// The active targets (`/api/v1/targets`): each with `scrapeUrl`, `health` (`up`, `down` or
    /// `unknown` before the first scrape), `lastError` (such as a 401 for a wrong token) and
    /// `lastScrape`.
    pub fn targets(&self) -> Value {
        let mut answer = http::request(&self.addr, "GET", "/api/v1/targets", &[], b"").json();
        answer["data"]["activeTargets"].take()
    }

    /// Each target's URL, health and last error, one a line, for a failing test.
    fn scrapes(&self) -> String {
        let targets = self.targets();
        let lines: Vec<String> = targets
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                format!(
                    "{} is {} (last error: {})",
                    t["scrapeUrl"], t["health"], t["lastError"]
                )
            })
            .collect();
        if lines.is_empty() {
            "none yet (a new target shows some 5 s after the start)".to_string()
        } else {
            lines.join("\n")
        }
    }

    /// What Prometheus wrote, for a failing test.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.folder.path().join("prometheus.log")).unwrap_or_default()
    }
}
