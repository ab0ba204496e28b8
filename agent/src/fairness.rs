//! Fairness between people (DESIGN §13): texts waiting for turns are served round-robin by who
//! sent them, and each person may start only so many turns an hour (`/data/rate.json`: the start
//! times of the last hour, per sender). The turn loop asks; this module only counts and picks.
//! **Invariant:** one sender's waiting texts keep their order; only whose turn is next changes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::message::{Incoming, Tier};

/// Turns a guest may start in an hour: enough to talk, too few to keep the model busy for
/// everyone else.
pub const GUEST_TURNS_PER_HOUR: usize = 20;

/// Turns a member may start in an hour.
pub const MEMBER_TURNS_PER_HOUR: usize = 60;

/// The window of the hourly limit.
pub const HOUR: Duration = Duration::from_secs(60 * 60);

/// How many turns a sender of `tier` may start in an hour; owners have no limit.
pub fn turns_per_hour(tier: Tier) -> Option<usize> {
    match tier {
        Tier::Guest => Some(GUEST_TURNS_PER_HOUR),
        Tier::Member => Some(MEMBER_TURNS_PER_HOUR),
        Tier::Owner => None,
    }
}

/// Who a text counts for: its person, or `actor:<id>` for an actor's text.
pub fn sender(message: &Incoming) -> String {
    match &message.person {
        Some(person) => person.clone(),
        None => format!("actor:{}", message.from),
    }
}

/// The index in `waiting` of the text to serve next: the first text of the sender served least
/// recently (never served first), so every waiting sender gets a turn before anyone's second.
pub fn next(waiting: &[Incoming], served: &HashMap<String, u64>) -> usize {
    (0..waiting.len())
        .min_by_key(|&n| served.get(&sender(&waiting[n])).copied().unwrap_or(0))
        .unwrap_or(0)
}

/// Turn starts of the last hour, per sender, in unix seconds.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Starts(BTreeMap<String, Vec<u64>>);

impl Starts {
    pub fn load(data: &Path) -> Starts {
        std::fs::read(data.join("rate.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// `None` when `sender` may start another turn now (with `queued` texts already waiting);
    /// else how long until they may.
    pub fn wait(&self, sender: &str, limit: usize, queued: usize, now: u64) -> Option<Duration> {
        let recent: Vec<u64> = self.recent(sender, now);
        if recent.len() + queued < limit {
            return None;
        }
        // The start that must leave the window before one more fits.
        let freeing = recent.get(
            (recent.len() + queued + 1)
                .saturating_sub(limit)
                .saturating_sub(1),
        );
        let at = freeing.map_or(now + HOUR.as_secs(), |t| t + HOUR.as_secs());
        Some(Duration::from_secs(at.saturating_sub(now).max(1)))
    }

    /// Records a start, forgetting those older than an hour.
    pub fn record(&mut self, data: &Path, sender: &str, now: u64) -> Result<(), String> {
        let recent = self.recent(sender, now);
        self.0.insert(sender.to_string(), recent);
        self.0.get_mut(sender).expect("just inserted").push(now);
        self.0
            .retain(|_, starts| starts.iter().any(|&t| t + HOUR.as_secs() > now));
        let path = data.join("rate.json");
        // A map of numbers always serialises.
        let text = serde_json::to_string(self).expect("starts serialise");
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn recent(&self, sender: &str, now: u64) -> Vec<u64> {
        let starts = self.0.get(sender).map_or(&[][..], Vec::as_slice);
        starts
            .iter()
            .copied()
            .filter(|&t| t + HOUR.as_secs() > now)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(person: &str) -> Incoming {
        Incoming {
            person: Some(person.into()),
            ..Incoming::default()
        }
    }

    #[test]
    fn the_sender_served_least_recently_goes_first() {
        let waiting = [text("ann"), text("ann"), text("bob"), text("cid")];
        let mut served = HashMap::new();
        assert_eq!(next(&waiting, &served), 0);
        served.insert("ann".to_string(), 1);
        assert_eq!(next(&waiting, &served), 2);
        served.insert("bob".to_string(), 2);
        assert_eq!(next(&waiting, &served), 3);
        served.insert("cid".to_string(), 3);
        assert_eq!(next(&waiting, &served), 0);
    }

    #[test]
    fn past_the_hourly_limit_the_wait_is_until_the_oldest_start_leaves_the_hour() {
        let data = crate::testing::temp_dir("rate");
        let mut starts = Starts::default();
        for t in 0..3 {
            starts.record(&data, "ann", 1000 + t * 60).unwrap();
        }
        let starts = Starts::load(&data);
        assert_eq!(starts.wait("ann", 4, 0, 1200), None);
        assert_eq!(
            starts.wait("ann", 3, 0, 1200),
            Some(Duration::from_secs(3400))
        );
        assert_eq!(
            starts.wait("ann", 4, 1, 1200),
            Some(Duration::from_secs(3400))
        );
        assert_eq!(starts.wait("bob", 3, 0, 1200), None);
        // An hour after the first start, one more fits.
        assert_eq!(starts.wait("ann", 3, 0, 1000 + 3600), None);
    }
}
