//! What turns cost (DESIGN §12, Budget; §13, tiers): pricing one response's usage, and the day's
//! spending in `/data/spend.json`, counted per UTC day for the world and for each payer (a
//! person, an actor's owner for its turns, or an actor that acts for nobody). The caps (each
//! payer's, and the world's `max_world_day_usd`) are the turn loop's decision; this module only
//! measures.
//! **Invariant:** spending is written after every priced response, before its tools run, so a
//! crash never forgets money already spent.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::Price;
use crate::provider::Usage;

const SECONDS_PER_DAY: u64 = 24 * 60 * 60;

/// The price of `usage` in USD.
pub fn cost(usage: &Usage, price: &Price) -> f64 {
    (usage.input_tokens as f64 * price.input
        + usage.output_tokens as f64 * price.output
        + usage.cache_read_tokens as f64 * price.cache_read
        + usage.cache_write_tokens as f64 * price.cache_write)
        / 1_000_000.0
}

/// One day's spending, as `spend.json` keeps it: `{"day": "2026-12-01", "usd": 1.25, "usage":
/// {...}, "people": {"ann": {"usd", "usage"}}, "actors": {"echo": {...}}}`: the world's total,
/// then each payer's part. Tokens of models without a price count in `usage` but not in `usd`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spend {
    pub day: String,
    pub usd: f64,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub people: BTreeMap<String, Spent>,
    #[serde(default)]
    pub actors: BTreeMap<String, Spent>,
}

/// One payer's part of a day.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    pub usd: f64,
    #[serde(default)]
    pub usage: Usage,
}

/// Who a turn's spending counts for.
#[derive(Clone, Debug, PartialEq)]
pub enum Payer {
    Person(String),
    Actor(String),
    /// A turn saved by an agent from before people: only the world's total.
    World,
}

impl Spend {
    /// Today's spending; a file of another day (or none, or one unreadable) starts at zero.
    pub fn load(path: &Path, now: SystemTime) -> Spend {
        let today = utc_day(now);
        std::fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Spend>(&bytes).ok())
            .filter(|spend| spend.day == today)
            .unwrap_or(Spend {
                day: today,
                ..Spend::default()
            })
    }

    /// What `payer` spent today.
    pub fn of(&self, payer: &Payer) -> f64 {
        match payer {
            Payer::Person(id) => self.people.get(id).map_or(0.0, |s| s.usd),
            Payer::Actor(id) => self.actors.get(id).map_or(0.0, |s| s.usd),
            Payer::World => self.usd,
        }
    }

    /// Adds a response's price and usage to the world and to `payer`.
    pub fn add(&mut self, payer: &Payer, usd: f64, usage: &Usage) {
        self.usd += usd;
        self.usage.add(*usage);
        let part = match payer {
            Payer::Person(id) => self.people.entry(id.clone()).or_default(),
            Payer::Actor(id) => self.actors.entry(id.clone()).or_default(),
            Payer::World => return,
        };
        part.usd += usd;
        part.usage.add(*usage);
    }

    pub fn save(&self, path: &Path) -> Result<(), String> {
        // A day, a number and counts always serialise.
        let text = serde_json::to_string_pretty(self).expect("spend serialises");
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The UTC day of `t` as `YYYY-MM-DD`.
pub fn utc_day(t: SystemTime) -> String {
    let days = (seconds(t) / SECONDS_PER_DAY) as i64;
    // Howard Hinnant's civil_from_days: days since 1970-01-01 to a proleptic Gregorian date.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// How long until the next UTC midnight, when the day's cap resets.
pub fn until_midnight(t: SystemTime) -> Duration {
    Duration::from_secs(SECONDS_PER_DAY - seconds(t) % SECONDS_PER_DAY)
}

fn seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `3 h 05 min`, `12 min` or `40 s`: a wait in words.
pub fn duration_words(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60) {
        (0, 0) => format!("{s} s"),
        (0, m) => format!("{m} min"),
        (h, m) => format!("{h} h {m:02} min"),
    }
}

/// USD for a person: `$0.0123` below a dollar, `$4.56` above.
pub fn usd_words(usd: f64) -> String {
    if usd < 1.0 {
        format!("${usd:.4}")
    } else {
        format!("${usd:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_priced_per_million_tokens_of_each_kind() {
        let price = Price {
            input: 3.0,
            output: 15.0,
            cache_read: 0.3,
            cache_write: 3.75,
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cache_read_tokens: 2_000_000,
            cache_write_tokens: 10_000,
        };
        let usd = cost(&usage, &price);
        assert!((usd - (3.0 + 1.5 + 0.6 + 0.0375)).abs() < 1e-9, "{usd}");
    }

    #[test]
    fn days_are_utc_dates() {
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(utc_day(at(0)), "1970-01-01");
        assert_eq!(utc_day(at(951_782_400)), "2000-02-29");
        assert_eq!(utc_day(at(1_796_083_199)), "2026-11-30");
        assert_eq!(utc_day(at(1_796_083_200)), "2026-12-01");
        assert_eq!(
            until_midnight(at(1_796_083_200 - 90)),
            Duration::from_secs(90)
        );
        assert_eq!(
            duration_words(Duration::from_secs(3 * 3600 + 5 * 60)),
            "3 h 05 min"
        );
        assert_eq!(duration_words(Duration::from_secs(40)), "40 s");
    }

    #[test]
    fn another_days_spending_starts_at_zero() {
        let dir = crate::testing::temp_dir("spend");
        let path = dir.join("spend.json");
        let day = UNIX_EPOCH + Duration::from_secs(1_796_083_200);
        let mut spend = Spend::load(&path, day);
        assert_eq!((spend.day.as_str(), spend.usd), ("2026-12-01", 0.0));
        spend.usd = 2.5;
        spend.save(&path).unwrap();
        assert_eq!(Spend::load(&path, day).usd, 2.5);
        let next = day + Duration::from_secs(SECONDS_PER_DAY);
        assert_eq!(Spend::load(&path, next).usd, 0.0);
        std::fs::write(&path, "not json").unwrap();
        assert_eq!(Spend::load(&path, day).usd, 0.0);
    }

    #[test]
    fn each_payer_has_its_part_of_the_worlds_day() {
        let mut spend = Spend::default();
        let (ann, echo) = (Payer::Person("ann".into()), Payer::Actor("echo".into()));
        spend.add(&ann, 1.5, &Usage::default());
        spend.add(&ann, 0.5, &Usage::default());
        spend.add(&echo, 0.25, &Usage::default());
        spend.add(&Payer::World, 1.0, &Usage::default());
        assert_eq!((spend.of(&ann), spend.of(&echo)), (2.0, 0.25));
        assert_eq!(spend.of(&Payer::Person("bob".into())), 0.0);
        assert_eq!(spend.of(&Payer::World), 3.25);
    }
}
