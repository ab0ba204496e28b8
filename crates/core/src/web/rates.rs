//! Rates and the graph of who talks to whom, from samples of the router's counters.
//!
//! The router counts, per mailbox, the messages each sender got into it since the host started
//! (`Router::traffic`); samples of those counts a second apart, kept for [`GRAPH_WINDOW`], give
//! each actor's messages in and out per second and each sender→recipient edge's rate.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::broker::router::Traffic;
use crate::message::ActorId;

/// The graph shows the traffic of this long.
pub const GRAPH_WINDOW: Duration = Duration::from_secs(60);
/// The actors' table shows rates over this long.
pub const RATE_WINDOW: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Rates {
    samples: VecDeque<Sample>,
}

struct Sample {
    at: Instant,
    /// (sender, recipient) → messages accepted since the host started.
    pairs: HashMap<(ActorId, ActorId), u64>,
    /// Messages waiting in each mailbox.
    queued: HashMap<ActorId, usize>,
}

/// One actor's traffic for the table.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ActorRates {
    pub queued: usize,
    pub in_per_sec: f64,
    pub out_per_sec: f64,
}

impl Rates {
    /// Adds a sample taken at `at`; samples older than the graph's window (and one) go.
    pub fn add(&mut self, at: Instant, traffic: &[Traffic]) {
        let mut pairs = HashMap::new();
        let mut queued = HashMap::new();
        for mailbox in traffic {
            queued.insert(mailbox.actor.clone(), mailbox.queued);
            for (from, n) in &mailbox.accepted_from {
                pairs.insert((from.clone(), mailbox.actor.clone()), *n);
            }
        }
        self.samples.push_back(Sample { at, pairs, queued });
        while self
            .samples
            .get(1)
            .is_some_and(|second| at.duration_since(second.at) >= GRAPH_WINDOW)
        {
            self.samples.pop_front();
        }
    }

    /// The newest sample and the oldest one within `window` of it.
    fn span(&self, window: Duration) -> Option<(&Sample, &Sample, f64)> {
        let newest = self.samples.back()?;
        let oldest = self
            .samples
            .iter()
            .find(|s| newest.at.duration_since(s.at) <= window)?;
        let seconds = newest.at.duration_since(oldest.at).as_secs_f64();
        Some((oldest, newest, seconds))
    }

    /// Each actor's queue and rates over [`RATE_WINDOW`].
    pub fn per_actor(&self) -> HashMap<ActorId, ActorRates> {
        let mut rates: HashMap<ActorId, ActorRates> = HashMap::new();
        let Some((oldest, newest, seconds)) = self.span(RATE_WINDOW) else {
            return rates;
        };
        for (actor, queued) in &newest.queued {
            rates.entry(actor.clone()).or_default().queued = *queued;
        }
        if seconds > 0.0 {
            for ((from, to), n) in &newest.pairs {
                let before = oldest.pairs.get(&(from.clone(), to.clone())).unwrap_or(&0);
                let rate = n.saturating_sub(*before) as f64 / seconds;
                rates.entry(from.clone()).or_default().out_per_sec += rate;
                rates.entry(to.clone()).or_default().in_per_sec += rate;
            }
        }
        rates
    }

    /// Who sent to whom over [`GRAPH_WINDOW`]: `{"window_s", "edges": [{"from","to","count",
    /// "per_sec"}]}`, edges with no message in the window left out, busiest first.
    pub fn graph(&self) -> Value {
        let mut edges = Vec::new();
        if let Some((oldest, newest, seconds)) = self.span(GRAPH_WINDOW) {
            for ((from, to), n) in &newest.pairs {
                let before = oldest.pairs.get(&(from.clone(), to.clone())).unwrap_or(&0);
                let count = n.saturating_sub(*before);
                if count > 0 {
                    let per_sec = if seconds > 0.0 {
                        count as f64 / seconds
                    } else {
                        0.0
                    };
                    edges.push((count, from.clone(), to.clone(), per_sec));
                }
            }
        }
        edges.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| (&a.1, &a.2).cmp(&(&b.1, &b.2))));
        let edges: Vec<Value> = edges
            .into_iter()
            .map(|(count, from, to, per_sec)| {
                json!({
                    "from": from.as_str(), "to": to.as_str(), "count": count,
                    "per_sec": (per_sec * 100.0).round() / 100.0,
                })
            })
            .collect();
        json!({"window_s": GRAPH_WINDOW.as_secs(), "edges": edges})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ActorId {
        ActorId::parse(s).unwrap()
    }

    fn traffic(to: &str, queued: usize, from: &[(&str, u64)]) -> Traffic {
        Traffic {
            actor: id(to),
            queued,
            accepted_from: from.iter().map(|(f, n)| (id(f), *n)).collect(),
            accepted_bytes: 0,
            waits: Default::default(),
        }
    }

    #[test]
    fn rates_and_edges_come_from_the_difference_between_samples() {
        let start = Instant::now();
        let mut rates = Rates::default();
        rates.add(start, &[traffic("b", 0, &[("a", 100)])]);
        assert_eq!(rates.graph()["edges"], json!([]), "one sample has no rate");
        rates.add(
            start + Duration::from_secs(2),
            &[traffic("b", 3, &[("a", 120)]), traffic("a", 0, &[("b", 1)])],
        );
        let per = rates.per_actor();
        assert_eq!(per[&id("a")].out_per_sec, 10.0);
        assert_eq!(per[&id("a")].in_per_sec, 0.5);
        assert_eq!(per[&id("b")].in_per_sec, 10.0);
        assert_eq!(per[&id("b")].queued, 3);
        assert_eq!(
            rates.graph()["edges"],
            json!([
                {"from": "a", "to": "b", "count": 20, "per_sec": 10.0},
                {"from": "b", "to": "a", "count": 1, "per_sec": 0.5},
            ])
        );
        // A minute later with no traffic, the edges are gone from the graph.
        rates.add(
            start + Duration::from_secs(70),
            &[traffic("b", 0, &[("a", 120)]), traffic("a", 0, &[("b", 1)])],
        );
        rates.add(
            start + Duration::from_secs(71),
            &[traffic("b", 0, &[("a", 120)]), traffic("a", 0, &[("b", 1)])],
        );
        assert_eq!(rates.graph()["edges"], json!([]));
    }
}
