//! The chaos run's history and its checker (DESIGN §20), in the style of Jepsen's Elle: the run
//! records every operation it made or saw, with its outcome and when, and the checker reads only
//! that history. `notes` is a list the ticker appends to (each tick once, none lost, each run's in
//! order); each counter is a register its steps increment (each step counted at most once, by one
//! instance at a time, none of its committed counts lost). A violation names the operations that
//! show it, and [`History::shortened`] prints them with the faults around them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// Ticks of ticker run `r` are numbered from `r * RUN + 1`.
pub const RUN: u64 = 1_000_000;

/// The faults a shortened history shows before the first operation of a violation.
const FAULTS_BEFORE: f64 = 15.0;
/// The operations of one kind a shortened history shows at most; the rest are counted.
const SHORT: usize = 12;

/// What happened, as the test saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// A host killed, paused or started again, a NATS node killed or started again.
    Fault(String),
    /// A step asked of `counter` (tag `tag`) through host `via`'s console.
    Asked {
        counter: &'static str,
        tag: u64,
        via: &'static str,
    },
    /// The counter's answer: instance `run` committed count `n` for step `tag`, heard by host
    /// `console`'s console.
    Counted {
        counter: &'static str,
        tag: u64,
        n: u64,
        run: String,
        console: &'static str,
    },
    /// The broker told host `console`'s console that a message to `counter` was not delivered
    /// (`lost`: it was lost with a host).
    Undeliverable {
        counter: String,
        console: &'static str,
        lost: bool,
    },
    /// The counter's committed count once the chaos was over.
    Final { counter: &'static str, n: u64 },
    /// The ticker was asked to send run `run`'s ticks (numbered from `run * RUN + 1`).
    TickerStarted { run: u64 },
    /// The ticker committed that it sent this tick (its output is accepted before its commit).
    Sent { tick: u64 },
    /// `notes`' list holds this tick, at this place in the list.
    Stored { tick: u64 },
}

/// An operation and when it happened, in seconds from the start of the chaos.
#[derive(Debug, Clone)]
pub struct Event {
    pub at: f64,
    pub op: Op,
}

/// Everything the run recorded, in the order it was recorded.
#[derive(Debug, Default)]
pub struct History {
    pub events: Vec<Event>,
}

/// A property the history breaks, with the events (indices into the history) that show it.
#[derive(Debug)]
pub struct Violation {
    pub what: String,
    pub events: Vec<usize>,
}

/// What the checker counted, for the run's summary line.
#[derive(Debug, Default, PartialEq)]
pub struct Counts {
    pub faults: usize,
    pub asked: usize,
    pub answered: usize,
    /// Instances that counted: the first of each counter, then one per fail-over or restart.
    pub instances: usize,
    pub undeliverable: usize,
    pub sent: usize,
    pub stored: usize,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} faults, {} steps asked, {} answered by {} instances, {} undeliverable, \
             {} ticks sent, {} stored",
            self.faults,
            self.asked,
            self.answered,
            self.instances,
            self.undeliverable,
            self.sent,
            self.stored
        )
    }
}

impl History {
    pub fn record(&mut self, at: f64, op: Op) {
        self.events.push(Event { at, op });
    }

    /// Checks every property; the violations found (none for a good run) and the counts.
    pub fn check(&self) -> (Vec<Violation>, Counts) {
        let mut violations = Vec::new();
        let mut counts = Counts::default();
        for event in &self.events {
            match &event.op {
                Op::Fault(_) => counts.faults += 1,
                Op::Asked { .. } => counts.asked += 1,
                Op::Counted { .. } => counts.answered += 1,
                Op::Undeliverable { .. } => counts.undeliverable += 1,
                Op::Sent { .. } => counts.sent += 1,
                Op::Stored { .. } => counts.stored += 1,
                Op::Final { .. } | Op::TickerStarted { .. } => {}
            }
        }
        let counters: BTreeSet<&str> = (self.events.iter())
            .filter_map(|e| match &e.op {
                Op::Asked { counter, .. } | Op::Final { counter, .. } => Some(*counter),
                Op::Counted { counter, .. } => Some(*counter),
                _ => None,
            })
            .collect();
        for counter in counters {
            counts.instances += self.check_counter(counter, &mut violations);
        }
        self.check_ticks(&mut violations);
        (violations, counts)
    }

    /// One counter's register: returns how many instances counted.
    fn check_counter(&self, counter: &str, violations: &mut Vec<Violation>) -> usize {
        let mine = |op: &Op| match op {
            Op::Asked { counter: c, .. }
            | Op::Counted { counter: c, .. }
            | Op::Final { counter: c, .. } => *c == counter,
            _ => false,
        };
        let mut asked: HashMap<u64, usize> = HashMap::new();
        let mut answers: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        let mut by_n: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        let mut runs: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        let mut finals = Vec::new();
        for (i, event) in self.events.iter().enumerate().filter(|(_, e)| mine(&e.op)) {
            match &event.op {
                Op::Asked { tag, .. } => {
                    asked.insert(*tag, i);
                }
                Op::Counted { tag, n, run, .. } => {
                    answers.entry(*tag).or_default().push(i);
                    by_n.entry(*n).or_default().push(i);
                    runs.entry(run).or_default().push(i);
                }
                Op::Final { .. } => finals.push(i),
                _ => {}
            }
        }
        for (tag, heard) in &answers {
            if heard.len() > 1 {
                violations.push(Violation {
                    what: format!("{counter}: step {tag} was counted {} times", heard.len()),
                    events: heard.clone(),
                });
            }
            if !asked.contains_key(tag) {
                violations.push(Violation {
                    what: format!("{counter}: step {tag} was counted but never asked"),
                    events: heard.clone(),
                });
            }
        }
        for (n, heard) in &by_n {
            if heard.len() > 1 {
                violations.push(Violation {
                    what: format!("{counter}: count {n} was reached {} times", heard.len()),
                    events: heard.clone(),
                });
            }
        }
        // One instance at a time: the counts of two instances never interleave, and each
        // instance's counts grow in the order each console heard them.
        let mut ranges: Vec<(u64, u64, &str)> = Vec::new();
        for (run, heard) in &runs {
            let ns: Vec<u64> = heard.iter().map(|&i| self.n(i)).collect();
            let mut by_console: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            for &i in heard {
                if let Op::Counted { console, .. } = &self.events[i].op {
                    by_console.entry(console).or_default().push(i);
                }
            }
            for (console, heard) in by_console {
                if !heard.windows(2).all(|w| self.n(w[0]) < self.n(w[1])) {
                    violations.push(Violation {
                        what: format!(
                            "{counter}: instance {run} told host {console}'s console its counts \
                             out of order"
                        ),
                        events: heard,
                    });
                }
            }
            let low = *ns.iter().min().expect("a run counted");
            let high = *ns.iter().max().expect("a run counted");
            ranges.push((low, high, run));
        }
        ranges.sort();
        for pair in ranges.windows(2) {
            let ((low_a, high_a, a), (low_b, high_b, b)) = (pair[0], pair[1]);
            if high_a >= low_b {
                violations.push(Violation {
                    what: format!(
                        "{counter}: instances {a} (counts {low_a}..={high_a}) and {b} \
                         ({low_b}..={high_b}) counted at once"
                    ),
                    events: [&runs[a][..], &runs[b][..]].concat(),
                });
            }
        }
        // No committed count lost, and no count that no step asked for.
        let highest = by_n.last_key_value().map(|(n, heard)| (*n, heard[0]));
        match (finals.last(), highest) {
            (None, _) => violations.push(Violation {
                what: format!("{counter}: no final count was read"),
                events: Vec::new(),
            }),
            (Some(&fin), highest) => {
                let n = match &self.events[fin].op {
                    Op::Final { n, .. } => *n,
                    _ => unreachable!("finals holds Final events"),
                };
                if let Some((high, at)) = highest
                    && n < high
                {
                    violations.push(Violation {
                        what: format!(
                            "{counter}: a committed step was lost: {high} was counted, the count \
                             is {n}"
                        ),
                        events: vec![at, fin],
                    });
                }
                if n > asked.len() as u64 {
                    violations.push(Violation {
                        what: format!(
                            "{counter}: the count is {n} but only {} steps were asked: a step \
                             was counted twice",
                            asked.len()
                        ),
                        events: vec![fin],
                    });
                }
            }
        }
        runs.len()
    }

    /// `notes`' list: every tick sent is stored, once, each ticker run's in order.
    fn check_ticks(&self, violations: &mut Vec<Violation>) {
        let mut started: BTreeMap<u64, usize> = BTreeMap::new();
        let mut sent: BTreeMap<u64, usize> = BTreeMap::new();
        let mut stored: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        let mut by_run: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, event) in self.events.iter().enumerate() {
            match event.op {
                Op::TickerStarted { run } => {
                    started.insert(run, i);
                }
                Op::Sent { tick } => {
                    sent.insert(tick, i);
                }
                Op::Stored { tick } => {
                    stored.entry(tick).or_default().push(i);
                    by_run.entry(tick / RUN).or_default().push(i);
                }
                _ => {}
            }
        }
        for (tick, at) in &stored {
            if at.len() > 1 {
                violations.push(Violation {
                    what: format!("tick {tick} was stored {} times", at.len()),
                    events: at.clone(),
                });
            }
        }
        let lost: Vec<u64> = (sent.keys())
            .filter(|tick| !stored.contains_key(tick))
            .copied()
            .collect();
        if !lost.is_empty() {
            violations.push(Violation {
                what: format!(
                    "{} ticks recorded as sent were never stored: {}",
                    lost.len(),
                    ranges(&lost)
                ),
                // With the start of each run they belong to, so that the shortened history
                // shows the faults from then on.
                events: (lost.iter().map(|tick| tick / RUN))
                    .collect::<BTreeSet<u64>>()
                    .iter()
                    .filter_map(|run| started.get(run).copied())
                    .chain(lost.iter().map(|tick| sent[tick]))
                    .collect(),
            });
        }
        for (run, at) in &by_run {
            if let Some(w) = at.windows(2).find(|w| self.tick(w[0]) >= self.tick(w[1])) {
                violations.push(Violation {
                    what: format!(
                        "ticker run {run}: tick {} was stored after tick {}",
                        self.tick(w[1]),
                        self.tick(w[0])
                    ),
                    events: w.to_vec(),
                });
            }
        }
    }

    fn n(&self, i: usize) -> u64 {
        match &self.events[i].op {
            Op::Counted { n, .. } => *n,
            _ => unreachable!("a Counted event"),
        }
    }

    fn tick(&self, i: usize) -> u64 {
        match &self.events[i].op {
            Op::Stored { tick } | Op::Sent { tick } => *tick,
            _ => unreachable!("a tick's event"),
        }
    }

    /// The events that show `violation`, at most [`SHORT`] of them, and every fault from
    /// [`FAULTS_BEFORE`] seconds before the first to the last: a history short enough to read.
    pub fn shortened(&self, violation: &Violation) -> String {
        let mut lines = vec![format!("violation: {}", violation.what)];
        let named: BTreeSet<usize> = violation.events.iter().copied().collect();
        let (first, last) = match (named.first(), named.last()) {
            (Some(&first), Some(&last)) => (self.events[first].at, self.events[last].at),
            _ => (f64::NEG_INFINITY, f64::INFINITY),
        };
        let mut shown = 0;
        for (i, event) in self.events.iter().enumerate() {
            let fault = matches!(event.op, Op::Fault(_))
                && event.at >= first - FAULTS_BEFORE
                && event.at <= last;
            if named.contains(&i) {
                shown += 1;
                if shown > SHORT {
                    continue;
                }
            } else if !fault {
                continue;
            }
            lines.push(format!("{:>8.1} s  #{i:<6} {:?}", event.at, event.op));
        }
        if shown > SHORT {
            lines.push(format!("… and {} more of its events", shown - SHORT));
        }
        lines.join("\n")
    }
}

/// `numbers` (ascending) as runs: `1-5, 7, 9-12`.
pub fn ranges(numbers: &[u64]) -> String {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &n in numbers {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == n => *end = n,
            _ => runs.push((n, n)),
        }
    }
    runs.iter()
        .map(|(start, end)| match start == end {
            true => start.to_string(),
            false => format!("{start}-{end}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The checker must find what it looks for: each property broken once in a small history.
#[cfg(test)]
mod tests {
    use super::*;

    /// A good run: two steps of `c1` by one instance, a fail-over, a third by the next; two
    /// ticks of run 1 sent and stored in order.
    fn good() -> History {
        let mut history = History::default();
        let ops = [
            asked(1, "a"),
            counted(1, 1, "r1", "a"),
            asked(2, "a"),
            counted(2, 2, "r1", "a"),
            Op::Fault("host a killed for 3s".into()),
            asked(3, "b"),
            counted(3, 3, "r2", "b"),
            Op::Final {
                counter: "c1",
                n: 3,
            },
            Op::Sent { tick: RUN + 1 },
            Op::Sent { tick: RUN + 2 },
            Op::Stored { tick: RUN + 1 },
            Op::Stored { tick: RUN + 2 },
        ];
        for (at, op) in ops.into_iter().enumerate() {
            history.record(at as f64, op);
        }
        history
    }

    fn asked(tag: u64, via: &'static str) -> Op {
        Op::Asked {
            counter: "c1",
            tag,
            via,
        }
    }

    fn counted(tag: u64, n: u64, run: &str, console: &'static str) -> Op {
        Op::Counted {
            counter: "c1",
            tag,
            n,
            run: run.into(),
            console,
        }
    }

    /// What the checker finds wrong once `change` is made to the good history; each of its
    /// shortened histories says the violation first.
    fn violations_after(change: impl FnOnce(&mut History)) -> Vec<String> {
        let mut history = good();
        change(&mut history);
        let (violations, _) = history.check();
        for violation in &violations {
            let shortened = history.shortened(violation);
            assert!(shortened.starts_with("violation: "), "{shortened}");
        }
        violations.into_iter().map(|v| v.what).collect()
    }

    #[test]
    fn a_good_history_passes_with_its_counts() {
        let (violations, counts) = good().check();
        assert!(violations.is_empty(), "{violations:?}");
        let expected = Counts {
            faults: 1,
            asked: 3,
            answered: 3,
            instances: 2,
            undeliverable: 0,
            sent: 2,
            stored: 2,
        };
        assert_eq!(counts, expected);
    }

    #[test]
    fn the_checker_finds_a_step_counted_twice() {
        let found = violations_after(|h| h.record(20.0, counted(3, 4, "r2", "b")));
        assert!(
            found.contains(&"c1: step 3 was counted 2 times".into()),
            "{found:?}"
        );
        let found = violations_after(|h| {
            h.events[7].op = Op::Final {
                counter: "c1",
                n: 4,
            }
        });
        assert_eq!(
            found,
            ["c1: the count is 4 but only 3 steps were asked: a step was counted twice"]
        );
    }

    #[test]
    fn the_checker_finds_two_instances_counting_at_once() {
        // The first instance, paused past its lease, counts again after the second took over.
        let found = violations_after(|h| {
            h.record(20.0, asked(4, "a"));
            h.record(21.0, counted(4, 4, "r1", "a"));
            h.record(
                22.0,
                Op::Final {
                    counter: "c1",
                    n: 4,
                },
            );
        });
        assert_eq!(
            found,
            ["c1: instances r1 (counts 1..=4) and r2 (3..=3) counted at once"]
        );
    }

    #[test]
    fn the_checker_finds_a_committed_step_lost() {
        let found = violations_after(|h| {
            h.events[7].op = Op::Final {
                counter: "c1",
                n: 2,
            }
        });
        assert_eq!(
            found,
            ["c1: a committed step was lost: 3 was counted, the count is 2"]
        );
    }

    #[test]
    fn the_checker_finds_counts_out_of_order_for_one_console() {
        let found = violations_after(|h| h.events.swap(1, 3));
        assert_eq!(
            found,
            ["c1: instance r1 told host a's console its counts out of order"]
        );
    }

    #[test]
    fn the_checker_finds_a_tick_lost_stored_twice_or_out_of_order() {
        let found = violations_after(|h| {
            h.events.pop();
        });
        assert_eq!(
            found,
            ["1 ticks recorded as sent were never stored: 1000002"]
        );
        let found = violations_after(|h| h.record(30.0, Op::Stored { tick: RUN + 1 }));
        assert!(
            found.contains(&"tick 1000001 was stored 2 times".into()),
            "{found:?}"
        );
        let found = violations_after(|h| h.events.swap(10, 11));
        assert_eq!(
            found,
            ["ticker run 1: tick 1000001 was stored after tick 1000002"]
        );
    }
}
