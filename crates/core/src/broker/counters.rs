//! What the host counts for its metrics (DESIGN §22) besides what the mailboxes count: requests
//! by type, restarts, rollbacks, builds, and the turns, tokens and cost actors report in their
//! spans; and how long turns, builds and upgrades took. Plain atomics, small maps and
//! histograms (shared handles that `/metrics` registers as they are), read by `web`'s
//! `/metrics`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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
}

/// How long things took, in seconds. Deliveries are not timed: the mailbox stamps messages with
/// the kernel's coarse clock because the precise one cost 2.4% of the flood's samples, its tick
/// (milliseconds) is longer than most deliveries, and a histogram's lock on every message would
/// slow the path the world bench measures.
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
