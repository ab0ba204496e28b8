//! A real OTLP/HTTP trace receiver for the tests of traces (DESIGN §22): `otlp_receiver.py`
//! beside this file, run by the python of `target/otel-venv` (`scripts/install-observability`
//! puts the official protobuf definitions there), on a free loopback port.
//!
//! Boundary: [`Otlp::endpoint`] in (what a host is given as `--otlp`), the spans it exported out
//! as JSON values ([`Otlp::spans`]), one per span in the order received, with hex ids. The
//! receiver dies on drop and with the test binary.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::service::{PythonService, venv_python};

/// How often a wait looks again at what was received.
const POLL: Duration = Duration::from_millis(100);

/// A running receiver; dropping it kills it and removes what it received.
pub struct Otlp {
    /// Writes `spans.jsonl`, what it received.
    service: PythonService,
}

impl Otlp {
    /// Starts the receiver and waits until it listens.
    pub fn start() -> Otlp {
        let python = venv_python(
            "otel-venv",
            "install-observability",
            "the trace tests need opentelemetry-proto",
        );
        let service =
            PythonService::start("the OTLP receiver", &python, "otlp_receiver.py", |folder| {
                vec![folder.join("spans.jsonl").into()]
            });
        Otlp { service }
    }

    /// `http://127.0.0.1:PORT`: the base URL, to which an exporter adds `/v1/traces`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.service.port())
    }

    /// Every span received so far, in the order received: objects with `trace_id`, `span_id`
    /// and `parent_span_id` (lowercase hex; the parent `""` for a root), `name`, `kind`,
    /// `start_unix_nano`, `end_unix_nano`, `attributes` (an object of plain JSON values),
    /// `events` (each `name` and `attributes`), `links` (each one's attributes), `status_code`,
    /// `status_message`, `resource` (an object) and `scope` (its name).
    pub fn spans(&self) -> Vec<Value> {
        self.service.json_lines("spans.jsonl")
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
        self.service.stderr()
    }
}
