//! How long this host's guests may run: the "may run until" deadline that a host of a cluster
//! moves forward at each renewal of its leases (DESIGN §20), and the term that a lapse ends.
//!
//! Guests are checked before every slice (`ticks`), and the cluster checks the same deadline
//! before anything leaves the host for an actor. The invariant a changer must keep: a term, once
//! ended, never allows anything again, and a deadline that passed within a term is moved forward
//! only by a renewal sent before it passed. A single host runs forever, in one term.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Instant;

/// A span between two lapses: whatever was begun in one (an instance, a message on its way out,
/// an acknowledgement) is allowed only while that term lasts.
pub type Term = u64;

/// `until` before the first renewal of a term: nothing may run yet.
const NOT_YET: u64 = 0;
/// `until` of a single host: no lease, no deadline.
const FOREVER: u64 = u64::MAX;

pub struct RunUntil {
    base: Instant,
    /// Nanoseconds after `base` until which the current term allows running; [`NOT_YET`] or
    /// [`FOREVER`]. Read on every guest poll (one load, and a clock read on a cluster host).
    until: AtomicU64,
    term: AtomicU64,
    /// Renewals and ends of terms, one at a time, so that a renewal of an ended term cannot
    /// move the deadline of the next.
    changing: Mutex<()>,
    /// Guests waiting for a renewal (their polls found the deadline passed); woken by every
    /// renewal and every end of a term, which is when the answer may change.
    waiting: Mutex<Vec<Waker>>,
    /// Wakes the host's own tasks that wait for the same (`RunUntil::settled`).
    changed: tokio::sync::Notify,
}

impl RunUntil {
    /// A single host's: everything is allowed, always.
    pub fn forever() -> Arc<RunUntil> {
        RunUntil::starting_at(FOREVER)
    }

    /// A host of a cluster's: nothing is allowed until its first renewal.
    pub fn until_renewed() -> Arc<RunUntil> {
        RunUntil::starting_at(NOT_YET)
    }

    fn starting_at(until: u64) -> Arc<RunUntil> {
        Arc::new(RunUntil {
            base: Instant::now(),
            until: AtomicU64::new(until),
            term: AtomicU64::new(1),
            changing: Mutex::new(()),
            waiting: Mutex::default(),
            changed: tokio::sync::Notify::new(),
        })
    }

    pub fn term(&self) -> Term {
        self.term.load(Ordering::SeqCst)
    }

    /// Whether what began in `term` may go on now: the term has not ended and its deadline has
    /// not passed.
    pub fn allows(&self, term: Term) -> bool {
        if self.term.load(Ordering::SeqCst) != term {
            return false;
        }
        match self.until.load(Ordering::SeqCst) {
            FOREVER => true,
            NOT_YET => false,
            until => self.nanos(Instant::now()) < until,
        }
    }

    /// Whether the deadline of a renewed term has passed: the host must stop its actors and
    /// end the term before it renews again.
    pub fn lapsed(&self) -> bool {
        match self.until.load(Ordering::SeqCst) {
            FOREVER | NOT_YET => false,
            until => self.nanos(Instant::now()) >= until,
        }
    }

    /// A renewal that was sent at `sent` succeeded: the deadline of `term` moves to `until`
    /// (never back). Refused (false) when the term has ended, or when its deadline had already
    /// passed at `sent`: a renewal sent after a lapse does not undo it.
    pub fn renewed(&self, term: Term, sent: Instant, until: Instant) -> bool {
        let extended = {
            let _one_at_a_time = self.changing.lock().expect("run-until lock");
            let current = self.until.load(Ordering::SeqCst);
            let in_time = current == NOT_YET || self.nanos(sent) < current;
            if self.term() != term || current == FOREVER || !in_time {
                false
            } else {
                self.until
                    .store(current.max(self.nanos(until).max(1)), Ordering::SeqCst);
                true
            }
        };
        if extended {
            self.wake();
        }
        extended
    }

    /// Ends the current term: nothing begun in it is allowed again, and nothing is allowed
    /// until the next renewal. Returns the new term.
    pub fn end_term(&self) -> Term {
        let term = {
            let _one_at_a_time = self.changing.lock().expect("run-until lock");
            self.until.store(NOT_YET, Ordering::SeqCst);
            self.term.fetch_add(1, Ordering::SeqCst) + 1
        };
        self.wake();
        term
    }

    /// Waits while `term` is current but its deadline has passed (a renewal may still come):
    /// true once it allows again, false once the term has ended.
    pub async fn settled(&self, term: Term) -> bool {
        loop {
            let changed = self.changed.notified();
            if self.allows(term) {
                return true;
            }
            if self.term() != term {
                return false;
            }
            changed.await;
        }
    }

    /// Wakes `waker` at the next renewal or end of a term. Register first, then look again at
    /// [`RunUntil::allows`], so that a renewal between the two is not missed.
    pub fn wake_on_change(&self, waker: &Waker) {
        let mut waiting = self.waiting.lock().expect("waiting lock");
        if !waiting.iter().any(|w| w.will_wake(waker)) {
            waiting.push(waker.clone());
        }
    }

    fn wake(&self) {
        let waiting = std::mem::take(&mut *self.waiting.lock().expect("waiting lock"));
        for waker in waiting {
            waker.wake();
        }
        self.changed.notify_waiters();
    }

    /// `at` as nanoseconds after `base`, at least 1 (0 is [`NOT_YET`]).
    fn nanos(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.base).as_nanos();
        u64::try_from(nanos).unwrap_or(FOREVER - 1).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_single_host_runs_forever_in_one_term() {
        let run = RunUntil::forever();
        let term = run.term();
        assert!(run.allows(term));
        assert!(!run.lapsed());
        let now = Instant::now();
        assert!(
            !run.renewed(term, now, now + Duration::from_secs(5)),
            "nothing to renew"
        );
        assert!(run.allows(term));
    }

    #[test]
    fn a_cluster_host_runs_only_between_a_renewal_and_its_deadline() {
        let run = RunUntil::until_renewed();
        let term = run.term();
        assert!(!run.allows(term), "nothing before the first renewal");
        assert!(!run.lapsed(), "but nothing lapsed either");

        let sent = Instant::now();
        assert!(run.renewed(term, sent, sent + Duration::from_secs(60)));
        assert!(run.allows(term));
        assert!(!run.allows(term + 1), "another term is not this one");

        // The deadline passes (a renewal that allowed 1 ms).
        let run = RunUntil::until_renewed();
        let term = run.term();
        let early = Instant::now();
        assert!(run.renewed(term, early, early + Duration::from_millis(1)));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!run.allows(term) && run.lapsed());
        // A renewal sent after the deadline does not undo the lapse.
        let now = Instant::now();
        assert!(!run.renewed(term, now, now + Duration::from_secs(5)));
        assert!(run.lapsed());
        // One sent before it (its acknowledgement came late) does.
        assert!(run.renewed(term, early, Instant::now() + Duration::from_secs(5)));
        assert!(run.allows(term));
    }

    #[test]
    fn an_ended_term_allows_nothing_again_and_the_next_begins_at_its_first_renewal() {
        let run = RunUntil::until_renewed();
        let old = run.term();
        let sent = Instant::now();
        assert!(run.renewed(old, sent, sent + Duration::from_secs(60)));
        let new = run.end_term();
        assert_ne!(new, old);
        assert!(!run.allows(old) && !run.allows(new));
        assert!(
            !run.renewed(old, sent, sent + Duration::from_secs(60)),
            "a renewal of the old term moves nothing"
        );
        assert!(!run.allows(new));
        let sent = Instant::now();
        assert!(run.renewed(new, sent, sent + Duration::from_secs(60)));
        assert!(run.allows(new));
        assert!(!run.allows(old), "never again");
    }

    #[tokio::test]
    async fn a_waiter_hears_the_renewal_or_the_end_of_its_term() {
        let run = RunUntil::until_renewed();
        let term = run.term();
        let waiter = tokio::spawn({
            let run = run.clone();
            async move { run.settled(term).await }
        });
        tokio::task::yield_now().await;
        let sent = Instant::now();
        run.renewed(term, sent, sent + Duration::from_secs(60));
        assert!(waiter.await.unwrap());

        let run = RunUntil::until_renewed();
        let early = Instant::now();
        run.renewed(term, early, early + Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(5));
        let waiter = tokio::spawn({
            let run = run.clone();
            async move { run.settled(term).await }
        });
        tokio::task::yield_now().await;
        run.end_term();
        assert!(!waiter.await.unwrap(), "its term ended");
    }
}
