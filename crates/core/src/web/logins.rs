//! Failed logins per client (DESIGN §18): a client (an IP address; an IPv6 one by its /64, which
//! one machine can fill) that tried [`ATTEMPTS_ALLOWED`] login links in vain within
//! [`ATTEMPT_WINDOW`] is answered 429 until the oldest of them leaves the window.
//! The counts live in memory only, so a failed login writes nothing; every attempt counts from
//! its start and only a successful one is forgiven, so attempts made at once cannot pass the
//! limit together. At most [`CLIENTS_REMEMBERED`] clients are remembered.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Login attempts that may fail within [`ATTEMPT_WINDOW`] from one client; the next one is
/// answered 429 (with `Retry-After`) without looking at its token.
pub const ATTEMPTS_ALLOWED: usize = 5;
/// The window the failed attempts of a client are counted in.
pub const ATTEMPT_WINDOW: Duration = Duration::from_secs(60);
/// The most clients whose failures are remembered, so that a flood from many addresses cannot
/// take the host's memory: past it the client whose last failure is oldest is forgotten.
pub const CLIENTS_REMEMBERED: usize = 4096;

/// The failed (or still running) login attempts of each client, newest last.
#[derive(Default)]
pub struct Attempts {
    clients: HashMap<IpAddr, VecDeque<Instant>>,
}

/// The address an attempt counts against: IPv4 as it is, IPv6 by its /64 network.
pub fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let network = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(network.into())
        }
        v4 => v4,
    }
}

impl Attempts {
    /// Starts an attempt of `client` at `now`: `Err` with how long it must wait when it failed
    /// too often lately (nothing is counted then). The attempt counts as failed until
    /// [`Attempts::succeeded`] forgives it.
    pub fn begin(&mut self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        if let Some(times) = self.clients.get_mut(&client) {
            times.retain(|at| now.duration_since(*at) < ATTEMPT_WINDOW);
            if times.len() >= ATTEMPTS_ALLOWED {
                let oldest = times.front().expect("at least one attempt");
                return Err(ATTEMPT_WINDOW.saturating_sub(now.duration_since(*oldest)));
            }
        } else if self.clients.len() >= CLIENTS_REMEMBERED {
            self.forget_one(now);
        }
        self.clients.entry(client).or_default().push_back(now);
        Ok(())
    }

    /// Forgives the attempt `client` began at `at`: it logged in.
    pub fn succeeded(&mut self, client: IpAddr, at: Instant) {
        if let Some(times) = self.clients.get_mut(&client) {
            if let Some(i) = times.iter().position(|t| *t == at) {
                times.remove(i);
            }
            if times.is_empty() {
                self.clients.remove(&client);
            }
        }
    }

    /// Makes room for one client: those whose failures all left the window go, else the one
    /// whose last failure is oldest.
    fn forget_one(&mut self, now: Instant) {
        self.clients.retain(|_, times| {
            times
                .back()
                .is_some_and(|last| now.duration_since(*last) < ATTEMPT_WINDOW)
        });
        if self.clients.len() < CLIENTS_REMEMBERED {
            return;
        }
        let oldest = self
            .clients
            .iter()
            .min_by_key(|(_, times)| times.back().copied())
            .map(|(client, _)| *client);
        if let Some(oldest) = oldest {
            self.clients.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        client_of(s.parse().unwrap())
    }

    #[test]
    fn the_attempt_after_the_allowed_failures_waits_until_the_oldest_leaves_the_window() {
        let start = Instant::now();
        let mut attempts = Attempts::default();
        for n in 0..ATTEMPTS_ALLOWED as u64 {
            let at = start + Duration::from_secs(n);
            assert_eq!(attempts.begin(ip("10.0.0.1"), at), Ok(()), "attempt {n}");
        }
        let later = start + Duration::from_secs(20);
        assert_eq!(
            attempts.begin(ip("10.0.0.1"), later),
            Err(Duration::from_secs(40))
        );
        assert_eq!(
            attempts.begin(ip("10.0.0.2"), later),
            Ok(()),
            "another client"
        );
        // Refused attempts are not counted: once the oldest failure is a minute old, one more.
        let minute = start + ATTEMPT_WINDOW;
        assert_eq!(attempts.begin(ip("10.0.0.1"), minute), Ok(()));
        assert!(attempts.begin(ip("10.0.0.1"), minute).is_err());
    }

    #[test]
    fn a_success_is_forgiven_and_ipv6_counts_by_network() {
        let start = Instant::now();
        let mut attempts = Attempts::default();
        for n in 0..ATTEMPTS_ALLOWED as u32 * 2 {
            let at = start + Duration::from_millis(n.into());
            attempts.begin(ip("10.0.0.1"), at).unwrap();
            attempts.succeeded(ip("10.0.0.1"), at);
        }
        assert!(attempts.clients.is_empty());
        for n in 0..ATTEMPTS_ALLOWED {
            attempts
                .begin(ip(&format!("2001:db8::{n:x}")), start)
                .unwrap();
        }
        assert!(attempts.begin(ip("2001:db8::ffff"), start).is_err());
        assert_eq!(attempts.begin(ip("2001:db8:0:1::1"), start), Ok(()));
        assert_eq!(ip("::ffff:10.0.0.1"), ip("10.0.0.1"));
    }

    #[test]
    fn the_clients_remembered_are_bounded_oldest_first() {
        let start = Instant::now();
        let mut attempts = Attempts::default();
        for n in 0..CLIENTS_REMEMBERED as u32 + 10 {
            let client = IpAddr::V4(n.into());
            let at = start + Duration::from_millis(n.into());
            for _ in 0..ATTEMPTS_ALLOWED {
                attempts.begin(client, at).unwrap();
            }
        }
        assert_eq!(attempts.clients.len(), CLIENTS_REMEMBERED);
        let first = IpAddr::V4(0.into());
        let last = IpAddr::V4((CLIENTS_REMEMBERED as u32 + 9).into());
        assert!(!attempts.clients.contains_key(&first), "the oldest went");
        assert!(
            attempts
                .begin(last, start + Duration::from_secs(1))
                .is_err()
        );
    }
}
