//! What the host counts for its metrics (DESIGN §22) besides what the mailboxes count: requests
//! by type, restarts, rollbacks, builds, and the turns, tokens and cost actors report in their
//! spans; and how long turns, builds and upgrades took, and how long messages waited to be
//! delivered. Plain atomics, small maps and histograms (shared handles that `/metrics`
//! registers as they are), read by `web`'s `/metrics`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use rustc_hash::FxHashMap;

use super::requests::REQUESTS;
use crate::message::ActorId;

#[derive(Default)]
pub struct Counters {
    /// Requests to the broker by type; types it does not know count as `unknown`.
    requests: Mutex<BTreeMap<&'static str, u64>>,
    /// Restarts after a crash, by actor (since the host started).
    restarts: Mutex<FxHashMap<ActorId, u64>>,
    pub rollbacks: AtomicU64,
    /// Rollbacks the broker made itself, after a crash loop.
    pub automatic_rollbacks: AtomicU64,
    pub builds_ok: AtomicU64,
    pub builds_failed: AtomicU64,
    /// Turns, model tokens and cost (in millionths of a dollar), from reported spans.
    pub turns: AtomicU64,
    pub input_tokens: AtomicU64,
    pub output_tokens: AtomicU64,
    pub cache_read_tokens: AtomicU64,
    pub cost_micro_usd: AtomicU64,
    pub spans: AtomicU64,
    pub durations: Durations,
    /// The public address's answers (DESIGN §24).
    pub http: HttpCounts,
}

/// A route's label set: its path, and the status of the answer.
pub type RouteLabels = Vec<(&'static str, String)>;

/// What the public address answered, by route (its path as written, `none` where no route
/// matched) and status, and how long each took to its head, by route. Shared handles, which
/// `/metrics` registers as they are.
pub struct HttpCounts {
    pub answers: Family<RouteLabels, Counter>,
    pub durations: Family<RouteLabels, Histogram, fn() -> Histogram>,
    /// Each route's metrics as the families hold them (they share their counts), found by the
    /// route's path alone: no labels are made for an answer once its route and status were
    /// counted before.
    seen: Mutex<FxHashMap<String, RouteCounts>>,
}

/// One route's metrics, handles to those of [`HttpCounts`]' families.
struct RouteCounts {
    duration: Histogram,
    by_status: Vec<(u16, Counter)>,
}

impl Default for HttpCounts {
    fn default() -> HttpCounts {
        fn histogram() -> Histogram {
            // From a quarter of a millisecond, doubling: up to about 4 minutes.
            Histogram::new(exponential_buckets(0.000_25, 2.0, 20))
        }
        HttpCounts {
            answers: Family::default(),
            durations: Family::new_with_constructor(histogram),
            seen: Mutex::default(),
        }
    }
}

impl HttpCounts {
    /// Counts an answer of `route` with `status`, `seconds` after the request came.
    pub fn answered(&self, route: &str, status: u16, seconds: f64) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.contains_key(route) {
            let labels = vec![("route", route.to_string())];
            let duration = self.durations.get_or_create(&labels).clone();
            let counts = RouteCounts {
                duration,
                by_status: Vec::new(),
            };
            seen.insert(route.to_string(), counts);
        }
        let counts = seen.get_mut(route).expect("inserted above");
        counts.duration.observe(seconds);
        match counts.by_status.iter().find(|(s, _)| *s == status) {
            Some((_, counter)) => {
                counter.inc();
            }
            None => {
                let labels = vec![("route", route.to_string()), ("status", status.to_string())];
                let counter = self.answers.get_or_create(&labels).clone();
                counter.inc();
                counts.by_status.push((status, counter));
            }
        }
    }
}

/// How long things took, in seconds (deliveries apart: [`Waits`]).
pub struct Durations {
    /// Agent turns, from the `invoke_agent` spans the agent reports.
    pub turns: Histogram,
    /// Builds by `cargo` that made a `.wasm`.
    pub builds: Histogram,
    /// Upgrades that were installed, from the request to the swap (tests and shadow run
    /// included).
    pub upgrades: Histogram,
}

/// The histograms' buckets double from a tenth of a second, this many: up to 0.1 × 2¹⁴ s
/// (about 27 minutes, past [`BUILD_TIME_LIMIT`](crate::cargo::BUILD_TIME_LIMIT)); a longer
/// turn counts in `+Inf` only.
const DURATION_BUCKETS: u16 = 15;

impl Default for Durations {
    fn default() -> Durations {
        let histogram = || Histogram::new(exponential_buckets(0.1, 2.0, DURATION_BUCKETS));
        Durations {
            turns: histogram(),
            builds: histogram(),
            upgrades: histogram(),
        }
    }
}

/// The upper bounds of [`Waits`]' buckets, in seconds: from 1 ms, four times each.
pub const WAIT_BOUNDS: [f64; 9] = [
    0.001, 0.004, 0.016, 0.064, 0.256, 1.024, 4.096, 16.384, 65.536,
];

/// How long messages waited in a mailbox before their actor took them: a histogram that each
/// mailbox keeps under the lock its reads take anyway (a shared histogram's lock, or atomics
/// two cores fight over, on every message would slow the path the world bench measures), made
/// at its first delivery, and summed by `/metrics`. The times come from the coarse clock the
/// mailbox stamps messages with (the precise one cost 2.4% of the flood's samples), so a wait
/// shorter than the kernel's tick (1 to 4 ms) counts as none.
#[derive(Clone, Debug, Default)]
pub struct Waits {
    /// Deliveries in each bucket of [`WAIT_BOUNDS`] (not cumulated), then those past the last.
    counts: [u64; WAIT_BOUNDS.len() + 1],
    sum: Duration,
}

impl Waits {
    pub fn observe(&mut self, waited: Duration) {
        let seconds = waited.as_secs_f64();
        let bucket = WAIT_BOUNDS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(WAIT_BOUNDS.len());
        self.counts[bucket] += 1;
        self.sum += waited;
    }

    pub fn add(&mut self, other: &Waits) {
        for (count, more) in self.counts.iter_mut().zip(other.counts) {
            *count += more;
        }
        self.sum += other.sum;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

impl EncodeMetric for Waits {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets: Vec<(f64, u64)> = WAIT_BOUNDS
            .into_iter()
            .chain([f64::INFINITY])
            .zip(self.counts)
            .collect();
        encoder.encode_histogram::<NoLabelSet>(self.sum.as_secs_f64(), self.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl Counters {
    pub fn request(&self, kind: &str) {
        let kind = REQUESTS
            .iter()
            .find(|known| **known == kind)
            .copied()
            .unwrap_or("unknown");
        *self
            .requests
            .lock()
            .expect("counters lock")
            .entry(kind)
            .or_default() += 1;
    }

    pub fn requests(&self) -> BTreeMap<&'static str, u64> {
        self.requests.lock().expect("counters lock").clone()
    }

    pub fn restarted(&self, actor: &ActorId) {
        *self
            .restarts
            .lock()
            .expect("counters lock")
            .entry(actor.clone())
            .or_default() += 1;
    }

    pub fn restarts(&self) -> FxHashMap<ActorId, u64> {
        self.restarts.lock().expect("counters lock").clone()
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::{Registry, Unit};

    #[test]
    fn a_wait_counts_in_the_first_bucket_it_fits_and_the_text_cumulates_them() {
        let mut waits = Waits::default();
        for ms in [0, 0, 4, 5, 300, 100_000] {
            waits.observe(Duration::from_millis(ms));
        }
        let mut more = Waits::default();
        more.observe(Duration::from_millis(1));
        waits.add(&more);
        assert_eq!(waits.count(), 7);
        let mut registry = Registry::default();
        registry.register_with_unit("wait", "Waits", Unit::Seconds, waits);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "# TYPE wait_seconds histogram",
            "wait_seconds_sum 100.31",
            "wait_seconds_count 7",
            r#"wait_seconds_bucket{le="0.001"} 3"#,
            r#"wait_seconds_bucket{le="0.004"} 4"#,
            r#"wait_seconds_bucket{le="0.016"} 5"#,
            r#"wait_seconds_bucket{le="0.256"} 5"#,
            r#"wait_seconds_bucket{le="1.024"} 6"#,
            r#"wait_seconds_bucket{le="65.536"} 6"#,
            r#"wait_seconds_bucket{le="+Inf"} 7"#,
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
    }
}
