//! A small seeded generator for the tests that choose at random (the kill loop, the chaos test):
//! every choice reproducible from the seed they print.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Xorshift, seeded from `variable` when it is set, else from the clock.
pub struct Random(u64);

impl Random {
    /// Seeded from the environment variable `variable` (to repeat a run), else from the clock;
    /// the seed, which the test prints with how to repeat it.
    pub fn from_env(variable: &str) -> (Random, u64) {
        let seed = std::env::var(variable)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        (Random(seed), seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = (high - low).as_millis() as u64;
        low + Duration::from_millis(self.below(span.max(1)))
    }
}
