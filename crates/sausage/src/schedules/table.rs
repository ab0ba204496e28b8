//! The schedules and every decision about them, without I/O (DESIGN §15): a table and a time in,
//! replies and fires out. The actor around it (`schedules::serve`) reads the clock, the mailbox,
//! the registry and the people, sends what this returns and saves the table.
//!
//! **Invariant:** each next fire is on the schedule's own grid (the cron pattern's times, or the
//! first fire plus whole `every`s), never "now plus something", so fires never drift; and one
//! pass fires a schedule at most once, however much time it missed.

use std::collections::BTreeSet;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, SubsecRound, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::message::ActorId;

/// Active schedules one creator (an actor, or a person) may have: a runaway actor or a person
/// cannot fill the scheduler's file or the world's mailboxes. Past it, `schedule` is refused
/// with the limit in the reason (replacing one of one's own still works).
pub const MAX_SCHEDULES_PER_CREATOR: usize = 20;

/// The shortest `every`, in seconds: a schedule is for minutes and days, not a busy loop.
pub const MIN_EVERY_SECONDS: u64 = 60;

/// A fire missed (the host was down, or its clock jumped) is sent late, once, if it was due
/// within this many hours; an older one is skipped.
pub const MISSED_WINDOW_HOURS: i64 = 24;

/// The largest `body` a schedule keeps, in bytes of JSON: every body lives in
/// `schedules.json`, rewritten whole at each change.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Who made a schedule: the person behind the request when it speaks for one, else the actor
/// that sent it. Written as `"creator"` and `"creator_kind"` (`person` or `actor`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Creator {
    #[serde(rename = "creator_kind")]
    pub kind: CreatorKind,
    #[serde(rename = "creator")]
    pub id: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CreatorKind {
    Person,
    Actor,
}

impl std::fmt::Display for Creator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            CreatorKind::Person => write!(f, "person {}", self.id),
            CreatorKind::Actor => write!(f, "actor {}", self.id),
        }
    }
}

/// Who asks: the creator they would be, and whether they may see and end every schedule (an
/// owner-tier person, or the terminal console).
#[derive(Clone, Debug)]
pub struct Asker {
    pub creator: Creator,
    pub all: bool,
}

/// When a schedule fires, as it was asked for (and as `schedules` lists it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum When {
    /// A 5-field cron pattern (or a nickname such as `@daily`) in a time zone (UTC without one).
    Cron {
        cron: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tz: Option<String>,
    },
    /// Every this many seconds, on the grid of the schedule's `next`.
    Every { every: u64 },
    /// Once, at this time (RFC 3339, UTC).
    At { at: String },
}

/// One schedule, as `schedules.json` keeps it and `schedules` lists it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Schedule {
    pub id: String,
    #[serde(flatten)]
    pub creator: Creator,
    pub to: String,
    pub body: Value,
    #[serde(flatten)]
    pub when: When,
    #[serde(with = "rfc3339")]
    pub next: DateTime<Utc>,
    /// When it last fired.
    #[serde(with = "rfc3339_or_null")]
    pub last: Option<DateTime<Utc>>,
}

/// A due schedule's message: `body` to `to`, from `scheduler`, tagged with the schedule's id.
#[derive(Clone, Debug, PartialEq)]
pub struct Fire {
    pub schedule: String,
    pub creator: Creator,
    pub to: String,
    pub body: Value,
}

/// What [`Table::due`] found: the messages to send, and whether the table changed (so it is
/// saved).
#[derive(Debug, Default)]
pub struct Due {
    pub fires: Vec<Fire>,
    pub changed: bool,
}

/// Every schedule, and how many ids the table has handed out (`s1`, `s2`, …), so an assigned
/// id is never reused, across restarts too.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Table {
    #[serde(default)]
    issued: u64,
    #[serde(default)]
    schedules: Vec<Schedule>,
}

impl Table {
    pub fn schedules(&self) -> &[Schedule] {
        &self.schedules
    }

    /// The earliest next fire, if any.
    pub fn next_fire(&self) -> Option<DateTime<Utc>> {
        self.schedules.iter().map(|s| s.next).min()
    }

    /// Answers a `schedule` request: the `scheduled` reply, or the reason it is refused.
    /// `known` is every actor that exists now.
    pub fn schedule(
        &mut self,
        asker: &Asker,
        request: &Value,
        now: DateTime<Utc>,
        known: &BTreeSet<String>,
    ) -> Result<Value, String> {
        let now = now.trunc_subsecs(0);
        let when = read_when(request, now)?;
        let to = read_to(request, known)?;
        let body = read_body(request)?;
        let id = match request.get("id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(
                ActorId::parse(id)
                    .map_err(|e| format!("`id`: {}", e.replace("actor id", "schedule id")))?
                    .to_string(),
            ),
            Some(_) => {
                return Err("`id` must be a string (a-z, 0-9, `-` and `_`, at most 64 \
                            characters), or left out to have one assigned"
                    .into());
            }
        };
        let replaces = match &id {
            Some(id) => match self.schedules.iter().position(|s| &s.id == id) {
                Some(at) if self.schedules[at].creator != asker.creator => {
                    return Err(format!(
                        "schedule {id} belongs to {}; choose another `id`",
                        self.schedules[at].creator
                    ));
                }
                found => found,
            },
            None => None,
        };
        let own = self
            .schedules
            .iter()
            .filter(|s| s.creator == asker.creator)
            .count();
        if replaces.is_none() && own >= MAX_SCHEDULES_PER_CREATOR {
            return Err(format!(
                "{} has {own} active schedules, the limit ({MAX_SCHEDULES_PER_CREATOR} per \
                 creator); unschedule one first",
                asker.creator
            ));
        }
        let next = first_fire(&when, now)?;
        let id = id.unwrap_or_else(|| self.new_id());
        let schedule = Schedule {
            id: id.clone(),
            creator: asker.creator.clone(),
            to,
            body,
            when,
            next,
            last: None,
        };
        let mut reply = json!({"type": "scheduled", "id": id, "next": format_time(next)});
        if let When::Cron { cron, .. } = &schedule.when {
            reply["description"] = json!(parse_cron(cron)?.describe());
        }
        match replaces {
            Some(at) => self.schedules[at] = schedule,
            None => self.schedules.push(schedule),
        }
        Ok(reply)
    }

    /// Answers an `unschedule` request: `unscheduled`, or why not.
    pub fn unschedule(&mut self, asker: &Asker, request: &Value) -> Result<Value, String> {
        let Some(id) = request.get("id").and_then(Value::as_str) else {
            return Err("missing `id` (a string): the schedule to end, as `scheduled` or \
                        `schedules` named it"
                .into());
        };
        let Some(at) = self.schedules.iter().position(|s| s.id == id) else {
            return Err(format!(
                "no schedule {id}; `{{\"type\":\"schedules\"}}` lists yours"
            ));
        };
        let schedule = &self.schedules[at];
        if schedule.creator != asker.creator && !asker.all {
            return Err(format!(
                "schedule {id} belongs to {}; only its creator or an owner may end it",
                schedule.creator
            ));
        }
        self.schedules.remove(at);
        Ok(json!({"type": "unscheduled", "id": id}))
    }

    /// Answers `schedules`: the asker's own, or every one for an asker who sees all.
    pub fn list(&self, asker: &Asker) -> Value {
        let shown: Vec<&Schedule> = self
            .schedules
            .iter()
            .filter(|s| asker.all || s.creator == asker.creator)
            .collect();
        json!({"type": "schedules", "schedules": shown})
    }

    /// Takes what is due at `now`: each schedule whose next fire has come fires once if a time
    /// it was due at lies within the last [`MISSED_WINDOW_HOURS`], and moves on to its first
    /// time after `now` (an `at` ends). A schedule whose next time is later than its first
    /// time after `now` was planned by a clock that has since gone back, and is planned again.
    pub fn due(&mut self, now: DateTime<Utc>) -> Due {
        let now = now.trunc_subsecs(0);
        let window = now - TimeDelta::hours(MISSED_WINDOW_HOURS);
        let mut due = Due::default();
        self.schedules.retain_mut(|s| {
            if s.next > now {
                if let Some(fresh) = after(&s.when, s.next, now)
                    && fresh < s.next
                {
                    s.next = fresh;
                    due.changed = true;
                }
                return true;
            }
            due.changed = true;
            let late = at_or_after(&s.when, s.next, s.next.max(window));
            if late.is_some_and(|t| t <= now) {
                due.fires.push(Fire {
                    schedule: s.id.clone(),
                    creator: s.creator.clone(),
                    to: s.to.clone(),
                    body: s.body.clone(),
                });
                s.last = Some(now);
            }
            match after(&s.when, s.next, now) {
                Some(next) => {
                    s.next = next;
                    true
                }
                None => false,
            }
        });
        due
    }

    /// Ends every schedule `gone` names a reason for; returns each with its reason.
    pub fn end_where(
        &mut self,
        mut gone: impl FnMut(&Schedule) -> Option<String>,
    ) -> Vec<(String, String)> {
        let mut ended = Vec::new();
        self.schedules.retain(|s| match gone(s) {
            Some(reason) => {
                ended.push((s.id.clone(), reason));
                false
            }
            None => true,
        });
        ended
    }

    /// Ends one schedule (its person is gone); true if it existed.
    pub fn end(&mut self, id: &str) -> bool {
        let before = self.schedules.len();
        self.schedules.retain(|s| s.id != id);
        self.schedules.len() < before
    }

    /// `s<n>` for the next unused n.
    fn new_id(&mut self) -> String {
        loop {
            self.issued += 1;
            let id = format!("s{}", self.issued);
            if !self.schedules.iter().any(|s| s.id == id) {
                return id;
            }
        }
    }
}

/// An example request, for reasons that say what would be right.
pub const EXAMPLE: &str = r#"{"type":"schedule","cron":"0 9 * * *","tz":"Europe/Berlin","to":"agent","body":{"type":"text","text":"…"}}"#;

fn read_when(request: &Value, now: DateTime<Utc>) -> Result<When, String> {
    let given: Vec<&str> = ["cron", "every", "at"]
        .into_iter()
        .filter(|k| request.get(*k).is_some_and(|v| !v.is_null()))
        .collect();
    let tz = request.get("tz").filter(|v| !v.is_null());
    if tz.is_some() && given != ["cron"] {
        return Err("`tz` goes with `cron` only (an `at` carries its offset, an `every` needs \
                    none)"
            .into());
    }
    let when = match given.as_slice() {
        ["cron"] => {
            let Some(cron) = request["cron"].as_str() else {
                return Err("`cron` must be a string of 5 fields, such as \"0 9 * * *\"".into());
            };
            let tz = match tz {
                None => None,
                Some(Value::String(tz)) => Some(parse_tz(tz)?.name().to_string()),
                Some(_) => {
                    return Err(
                        "`tz` must be a string: an IANA time zone such as Europe/Berlin".into(),
                    );
                }
            };
            parse_cron(cron)?;
            When::Cron {
                cron: cron.trim().to_string(),
                tz,
            }
        }
        ["every"] => match request["every"].as_u64() {
            Some(every) if every >= MIN_EVERY_SECONDS => When::Every { every },
            Some(every) => {
                return Err(format!(
                    "`every` is {every} s; the shortest is {MIN_EVERY_SECONDS} s (use `cron` \
                     for times of day)"
                ));
            }
            None => {
                return Err(format!(
                    "`every` must be a whole number of seconds, at least {MIN_EVERY_SECONDS}"
                ));
            }
        },
        ["at"] => {
            let Some(at) = request["at"].as_str() else {
                return Err("`at` must be a string: an RFC 3339 time such as \
                            2026-12-24T18:00:00+01:00"
                    .into());
            };
            let time = DateTime::parse_from_rfc3339(at)
                .map_err(|e| {
                    format!(
                        "`at` {at:?} is not an RFC 3339 time ({e}); write one such as \
                         2026-12-24T18:00:00+01:00 or 2026-12-24T17:00:00Z"
                    )
                })?
                .with_timezone(&Utc)
                .trunc_subsecs(0);
            if time <= now {
                return Err(format!(
                    "`at` {at} is in the past (it is {} now); give a later time",
                    format_time(now)
                ));
            }
            When::At {
                at: format_time(time),
            }
        }
        [] => {
            return Err(format!(
                "a schedule needs one of `cron` (5 fields, such as \"0 9 * * *\", with an \
                 optional `tz`), `every` (seconds, at least {MIN_EVERY_SECONDS}) or `at` (an \
                 RFC 3339 time); for example {EXAMPLE}"
            ));
        }
        many => {
            return Err(format!(
                "give one of `cron`, `every` or `at`, not {}",
                many.iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ));
        }
    };
    Ok(when)
}

fn read_to(request: &Value, known: &BTreeSet<String>) -> Result<String, String> {
    let Some(to) = request.get("to").and_then(Value::as_str) else {
        return Err("missing `to` (a string): the actor that gets the message, such as \"agent\"".into());
    };
    let to = ActorId::parse(to).map_err(|e| format!("`to`: {e}"))?;
    if !known.contains(to.as_str()) {
        let known: Vec<&str> = known.iter().map(String::as_str).collect();
        return Err(format!(
            "`to`: no actor `{to}`; known actors: {}",
            known.join(", ")
        ));
    }
    Ok(to.to_string())
}

fn read_body(request: &Value) -> Result<Value, String> {
    match request.get("body") {
        Some(body @ Value::Object(_)) => {
            let len = body.to_string().len();
            if len > MAX_BODY_BYTES {
                return Err(format!(
                    "`body` is {len} bytes; a schedule keeps at most {MAX_BODY_BYTES} (keep \
                     the data in a file and send its path)"
                ));
            }
            Ok(body.clone())
        }
        None | Some(Value::Null) => Err(
            "missing `body`: the message to send, a JSON object with a `type`, such as \
             {\"type\":\"text\",\"text\":\"…\"}"
                .into(),
        ),
        Some(_) => Err(
            "`body` must be a JSON object with a `type`, such as {\"type\":\"text\",\"text\":\"…\"}"
                .into(),
        ),
    }
}

/// A 5-field pattern (minute hour day-of-month month day-of-week) or a nickname (`@daily`).
fn parse_cron(cron: &str) -> Result<croner::Cron, String> {
    const FIELDS: &str = "minute, hour, day of month, month, day of week";
    let fields = cron.split_whitespace().count();
    if !cron.trim_start().starts_with('@') {
        match fields {
            5 => {}
            6 => {
                return Err(format!(
                    "`cron` {cron:?} has 6 fields; use 5 ({FIELDS}): schedules do not take \
                     seconds"
                ));
            }
            n => {
                return Err(format!(
                    "`cron` {cron:?} has {n} fields; a pattern has 5 ({FIELDS}), such as \
                     \"0 9 * * *\" for every day at 9:00"
                ));
            }
        }
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(cron)
        .map_err(|e| {
            format!(
                "`cron` {cron:?} is not a valid pattern ({e}); a pattern has 5 fields \
                 ({FIELDS}), such as \"*/15 * * * *\" or \"0 9 * * MON-FRI\""
            )
        })
}

fn parse_tz(tz: &str) -> Result<chrono_tz::Tz, String> {
    chrono_tz::Tz::from_str(tz).map_err(|_| {
        format!(
            "`tz` {tz:?} is not an IANA time zone; use a name such as Europe/Berlin, \
             America/New_York or UTC"
        )
    })
}

/// The first fire of a new schedule, strictly after `now`.
fn first_fire(when: &When, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    let next = match when {
        // The first fire is a whole `every` from now, and sets the grid.
        When::Every { every } => Some(now + seconds(*every)),
        _ => after(when, now, now),
    };
    next.ok_or_else(|| match when {
        When::Cron { cron, .. } => {
            format!("`cron` {cron:?} never matches a time in the coming years; check its days")
        }
        _ => "the schedule would never fire".to_string(),
    })
}

/// The first time of `when` strictly after `t`; `grid` is a time of the schedule (its next),
/// which places an `every`.
fn after(when: &When, grid: DateTime<Utc>, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    at_or_after(when, grid, t + TimeDelta::seconds(1))
}

/// The first time of `when` at `t` or later (`t` in whole seconds).
fn at_or_after(when: &When, grid: DateTime<Utc>, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    match when {
        When::Cron { cron, tz } => {
            let cron = parse_cron(cron).ok()?;
            let tz = match tz {
                Some(tz) => parse_tz(tz).ok()?,
                None => chrono_tz::UTC,
            };
            cron.find_next_occurrence(&t.with_timezone(&tz), true)
                .ok()
                .map(|t| t.with_timezone(&Utc))
        }
        When::Every { every } => {
            let every = *every as i64;
            // Whole periods from the grid to `t`, rounded down (`t` may be before the grid).
            let periods = (t - grid).num_seconds().div_euclid(every);
            let mut next = grid + TimeDelta::seconds(periods * every);
            if next < t {
                next += TimeDelta::seconds(every);
            }
            Some(next)
        }
        When::At { at } => DateTime::parse_from_rfc3339(at)
            .ok()
            .map(|at| at.with_timezone(&Utc))
            .filter(|at| *at >= t),
    }
}

fn seconds(n: u64) -> TimeDelta {
    TimeDelta::seconds(n as i64)
}

/// RFC 3339 in UTC, whole seconds: `2026-12-01T09:00:00Z`.
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{text:?}: {e}"))
}

mod rfc3339 {
    use super::*;

    pub fn serialize<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_time(*t))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = String::deserialize(d)?;
        parse_time(&text).map_err(serde::de::Error::custom)
    }
}

mod rfc3339_or_null {
    use super::*;

    pub fn serialize<S: serde::Serializer>(
        t: &Option<DateTime<Utc>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&format_time(*t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<DateTime<Utc>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| parse_time(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

