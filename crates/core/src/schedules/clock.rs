//! Where the scheduler takes its time from: the system's clock in a world, a clock that tests
//! move in tests, so that no test waits for real minutes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// The longest the scheduler waits before it reads the clock again, whatever its next fire: a
/// host clock that jumps (a suspended laptop, a corrected time) is noticed within this.
pub const LOOK_AGAIN: Duration = Duration::from_secs(60);

pub trait Clock: Clone + Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;

    /// Returns at `until`, or earlier: the caller reads [`Clock::now`] again and decides.
    fn wait(&self, until: DateTime<Utc>) -> impl Future<Output = ()> + Send;
}

/// The host's wall clock; waits are timed by tokio's monotonic clock, at most [`LOOK_AGAIN`].
#[derive(Clone)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    async fn wait(&self, until: DateTime<Utc>) {
        let wait = (until - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        tokio::time::sleep(wait.min(LOOK_AGAIN)).await;
    }
}

/// A clock that stands still until a test sets it; every change wakes a waiting scheduler,
/// forwards or backwards.
#[derive(Clone)]
pub struct ManualClock(Arc<tokio::sync::watch::Sender<DateTime<Utc>>>);

impl ManualClock {
    pub fn new(now: DateTime<Utc>) -> ManualClock {
        ManualClock(Arc::new(tokio::sync::watch::Sender::new(now)))
    }

    pub fn set(&self, now: DateTime<Utc>) {
        self.0.send_replace(now);
    }

    pub fn advance(&self, by: chrono::TimeDelta) {
        self.0.send_modify(|now| *now += by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.borrow()
    }

    async fn wait(&self, until: DateTime<Utc>) {
        let mut changes = self.0.subscribe();
        if *changes.borrow_and_update() >= until {
            return;
        }
        // The sender lives as long as the clock, which the waiter holds.
        let _ = changes.changed().await;
    }
}
