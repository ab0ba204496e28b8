//! How guests share the world's thread: the epoch ticks while a guest runs, and a guest whose
//! slice is over yields to every task that is ready before its next slice.
//!
//! A thread increments the engine's epoch every [`EPOCH_TICK`] while any guest has run since its
//! last tick, and sleeps when none has for [`IDLE_TICKS`] ticks (an idle world wakes no thread a
//! thousand times a second); the next poll of a guest wakes it ([`Ticking`]). At each tick a
//! running guest reaches, [`slices`] decides whether it yields ([`Slice`]).
//!
//! No slice begins once the host's [`RunUntil`] stops allowing the instance's term: its poll
//! stays pending until a renewal (or until the instance is dropped), and a guest that is running
//! when the deadline passes yields at its next tick.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::thread::Thread;
use std::time::Duration;

use anyhow::{Context as _, Result};
use wasmtime::{Engine, StoreContextMut, UpdateDeadline};

use super::Guest;
use super::hibernate::Sleeper;
use super::run_until::{RunUntil, Term};

/// How often a running guest is interrupted so that it yields to the others: one busy actor
/// holds the world's thread for at most two ticks at a time (see [`Slice`]). With 10 ms ticks
/// and a plain yield, a round trip between two actors beside a busy one took 40 ms; with this
/// and the deferred yield of [`slices`], 8 µs at its median and 0.8 ms at its 99th percentile
/// (`cargo bench --bench routing`).
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// After this many ticks with no guest polled, the ticker sleeps until one is.
const IDLE_TICKS: u32 = 10;

/// How long a sleeping ticker waits before it looks whether its engine is gone (a runtime
/// dropped in a test process); a guest's poll wakes it at once.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The epoch's ticker, shared by the thread that ticks and every instance's future.
#[derive(Default)]
pub struct Ticker {
    /// Guest polls under way (one at a time on the world's thread; several where instances run
    /// on a multi-threaded tokio runtime, as some tests do).
    polling: AtomicUsize,
    /// Set by every poll, cleared by every tick: whether a guest ran since the last tick.
    polled: AtomicBool,
    /// The ticker sleeps (or is about to): the next poll wakes it.
    asleep: AtomicBool,
    /// Ticks so far (what a test of the ticker watches; the engine's epoch is private).
    ticks: AtomicU64,
    thread: OnceLock<Thread>,
}

impl Ticker {
    /// Starts the thread that ticks `engine`'s epoch; it ends once the engine is dropped.
    pub fn start(engine: &Engine) -> Result<Arc<Ticker>> {
        let ticker = Arc::new(Ticker::default());
        let engine = engine.weak();
        let ticking = ticker.clone();
        let thread = std::thread::Builder::new()
            .name("sausage-epoch".into())
            .spawn(move || {
                let mut quiet = 0;
                while let Some(engine) = engine.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    ticking.ticks.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(EPOCH_TICK);
                    if ticking.ran() {
                        quiet = 0;
                    } else {
                        quiet += 1;
                        if quiet >= IDLE_TICKS {
                            ticking.sleep();
                            quiet = 0;
                        }
                    }
                }
            })
            .context("cannot start the epoch thread")?;
        let _ = ticker.thread.set(thread.thread().clone());
        Ok(ticker)
    }

    /// Whether a guest ran since the last look (or runs now); clears the mark.
    fn ran(&self) -> bool {
        self.polled.swap(false, Ordering::SeqCst) || self.polling.load(Ordering::SeqCst) > 0
    }

    /// Sleeps until a guest's poll wakes it (or [`IDLE_CHECK`] passes).
    fn sleep(&self) {
        self.asleep.store(true, Ordering::SeqCst);
        // A poll that began before `asleep` was set may not have seen it: look once more.
        if !self.ran() {
            std::thread::park_timeout(IDLE_CHECK);
        }
        self.asleep.store(false, Ordering::SeqCst);
    }

    /// A guest's poll begins: the ticker ticks.
    fn poll_begins(&self) {
        self.polling.fetch_add(1, Ordering::SeqCst);
        self.polled.store(true, Ordering::Relaxed);
        if self.asleep.load(Ordering::SeqCst)
            && self.asleep.swap(false, Ordering::SeqCst)
            && let Some(thread) = self.thread.get()
        {
            thread.unpark();
        }
    }

    fn poll_ends(&self) {
        self.polling.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An instance's future, which wakes the ticker whenever the guest may run, and runs it only
/// while the host's deadline allows the term it was created in.
pub struct Ticking<F> {
    ticker: Arc<Ticker>,
    run_until: Arc<RunUntil>,
    term: Term,
    inner: F,
}

impl<F: Future + Unpin> Ticking<F> {
    pub fn new(ticker: Arc<Ticker>, run_until: Arc<RunUntil>, term: Term, inner: F) -> Ticking<F> {
        Ticking {
            ticker,
            run_until,
            term,
            inner,
        }
    }
}

impl<F: Future + Unpin> Future for Ticking<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        if !this.run_until.allows(this.term) {
            // Registered before the second look, so a renewal in between still wakes it.
            this.run_until.wake_on_change(cx.waker());
            if !this.run_until.allows(this.term) {
                return Poll::Pending;
            }
        }
        this.ticker.poll_begins();
        let result = Pin::new(&mut this.inner).poll(cx);
        this.ticker.poll_ends();
        result
    }
}

/// The epoch callback of an instance: when its slice is over, the guest waits until the
/// scheduler next looks at I/O (tokio defers `yield_now` until then), so the tasks that are
/// ready, a message passing from actor to actor, go before a busy guest's next slice rather
/// than one step of theirs per slice. A guest whose term the host's deadline no longer allows
/// yields at once, and [`Ticking`] begins no slice after that.
pub fn slices(
    sleeper: Arc<Sleeper>,
    run_until: Arc<RunUntil>,
    term: Term,
) -> impl FnMut(StoreContextMut<'_, Guest>) -> wasmtime::Result<UpdateDeadline> + Send + Sync + 'static
{
    let mut slice = Slice::default();
    move |_| {
        Ok(
            if slice.is_over(sleeper.polls()) || !run_until.allows(term) {
                UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now()))
            } else {
                UpdateDeadline::Continue(1)
            },
        )
    }
}

/// When a guest's slice is over. A deadline is an epoch, set when a slice begins, and one may
/// pass while the instance waits (for a message, say): that is no slice at all. So the first
/// tick seen in a poll that did not begin with the guest's own yield starts a slice, and a guest
/// woken after a pause runs on instead of yielding at once. A slice lasts one or two ticks
/// ([`EPOCH_TICK`]).
#[derive(Default)]
pub struct Slice {
    /// The poll in which the current slice began.
    began: Option<u64>,
}

impl Slice {
    /// At a tick seen during the instance's `poll`th poll: whether the guest yields now.
    pub fn is_over(&mut self, poll: u64) -> bool {
        if self.began == Some(poll) {
            // The yield resumes in the next poll, where the next slice begins.
            self.began = Some(poll + 1);
            true
        } else {
            self.began = Some(poll);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_begins_at_the_first_tick_of_a_poll_and_ends_at_the_next() {
        let mut slice = Slice::default();
        // The first tick ever, and the first after a pause (polls 1 and 7): the deadline was
        // left by an earlier poll, so the guest runs on.
        assert!(!slice.is_over(1));
        assert!(
            slice.is_over(1),
            "a whole tick of running in one poll ends the slice"
        );
        // It resumes in poll 2 with a fresh slice: the next tick ends it.
        assert!(slice.is_over(2));
        assert!(slice.is_over(3));
        // It waited for a message, then is polled again (poll 7; polls 4 to 6 were short).
        assert!(!slice.is_over(7));
        assert!(slice.is_over(7));
    }

    #[test]
    fn the_ticker_sleeps_when_no_guest_runs_and_a_poll_wakes_it() {
        let engine = Engine::new(wasmtime::Config::new().epoch_interruption(true)).unwrap();
        let ticker = Ticker::start(&engine).unwrap();
        let epoch = || ticker.ticks.load(Ordering::Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        // Idle: it ticks IDLE_TICKS times, then the epoch stands still.
        while !ticker.asleep.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the ticker never slept"
            );
            std::thread::yield_now();
        }
        let slept_at = epoch();
        assert!(slept_at >= u64::from(IDLE_TICKS), "ticked {slept_at} times");
        // A poll wakes it at once (not at its next look, IDLE_CHECK later), and it ticks while
        // the poll lasts.
        ticker.poll_begins();
        let woken = std::time::Instant::now() + IDLE_CHECK / 2;
        while epoch() < slept_at + 3 {
            assert!(
                std::time::Instant::now() < woken,
                "a poll did not wake the ticker"
            );
            std::thread::yield_now();
        }
        ticker.poll_ends();
        // It goes back to sleep once the poll is over.
        while !ticker.asleep.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the ticker never slept again"
            );
            std::thread::yield_now();
        }
    }
}
