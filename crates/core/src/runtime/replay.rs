//! What makes a run of an instance repeatable (DESIGN §21): a clock the host sets to the time
//! each message was first delivered, and random numbers from a seed. A shadow run feeds a
//! version the messages its actor read; with the same clock and seed, two runs of one version
//! differ only where the version itself depends on something else (timing, say).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::SeedableRng;
use rand::rngs::StdRng;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

/// A clock that reads what the host last set it to, for both `wasi:clocks` interfaces. The
/// monotonic clock counts from the first time set, so it never goes back while the times set
/// do not.
#[derive(Default)]
pub struct ReplayClock {
    /// Nanoseconds since the Unix epoch.
    now: AtomicU64,
    /// The first time set, in nanoseconds since the Unix epoch (0 until then).
    origin: AtomicU64,
}

impl ReplayClock {
    pub fn new() -> Arc<ReplayClock> {
        Arc::default()
    }

    /// From now on the clock reads `time` (a time before the epoch reads as the epoch).
    pub fn set(&self, time: SystemTime) {
        let nanos = time
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let _ = self
            .origin
            .compare_exchange(0, nanos, Ordering::AcqRel, Ordering::Acquire);
        self.now.store(nanos, Ordering::Release);
    }

    fn nanos(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }
}

/// How an instance is made repeatable: its clocks and its random numbers.
#[derive(Clone)]
pub struct Replay {
    pub clock: Arc<ReplayClock>,
    /// Seeds `wasi:random/random`, `wasi:random/insecure` and `insecure-seed` alike.
    pub seed: u64,
}

impl Replay {
    pub(super) fn apply(&self, wasi: &mut wasmtime_wasi::WasiCtxBuilder) {
        wasi.wall_clock(Wall(self.clock.clone()))
            .monotonic_clock(Monotonic(self.clock.clone()))
            .secure_random(StdRng::seed_from_u64(self.seed))
            .insecure_random(StdRng::seed_from_u64(self.seed ^ 0x5a5a_5a5a))
            .insecure_random_seed(u128::from(self.seed));
    }
}

struct Wall(Arc<ReplayClock>);

impl HostWallClock for Wall {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.nanos())
    }
}

struct Monotonic(Arc<ReplayClock>);

impl HostMonotonicClock for Monotonic {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        let origin = self.0.origin.load(Ordering::Acquire);
        self.0.nanos().saturating_sub(origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_reads_what_was_set_and_counts_from_the_first_time() {
        let clock = ReplayClock::new();
        let first = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        clock.set(first);
        assert_eq!(
            Wall(clock.clone()).now(),
            Duration::from_secs(1_700_000_000)
        );
        assert_eq!(Monotonic(clock.clone()).now(), 0);
        clock.set(first + Duration::from_millis(1500));
        assert_eq!(Monotonic(clock.clone()).now(), 1_500_000_000);
        // A time before the first does not make the monotonic clock go below zero.
        clock.set(first - Duration::from_secs(1));
        assert_eq!(Monotonic(clock).now(), 0);
    }
}
