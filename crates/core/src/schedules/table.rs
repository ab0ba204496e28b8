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

/// Active schedules one creator (an actor, or a person) may have, and one person with every
/// actor they own (DESIGN §18: spawning actors to make schedules gets no more): a runaway actor
/// or a person cannot fill the scheduler's file or the world's mailboxes. Past it, `schedule`
/// is refused with the limit in the reason (replacing one of one's own still works).
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
    /// The person the request acts for (an actor's owner), whose count it adds to.
    pub owner: Option<String>,
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
    /// The person the schedule counts against: its creator, or the creating actor's owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
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
    /// When the schedule fired before this one, for [`Table::unfired`].
    pub last_before: Option<DateTime<Utc>>,
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
        if let Some(owner) = &asker.owner {
            let owned = self
                .schedules
                .iter()
                .filter(|s| s.owner.as_ref() == Some(owner))
                .count();
            if replaces.is_none() && owned >= MAX_SCHEDULES_PER_CREATOR {
                return Err(format!(
                    "{owner} has {owned} active schedules with those of the actors {owner} \
                     owns, the limit ({MAX_SCHEDULES_PER_CREATOR} per person); unschedule one \
                     first"
                ));
            }
        }
        let next = first_fire(&when, now)?;
        let id = id.unwrap_or_else(|| self.new_id());
        let schedule = Schedule {
            id: id.clone(),
            creator: asker.creator.clone(),
            owner: asker.owner.clone(),
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
            return Err(
                "missing `id` (a string): the schedule to end, as `scheduled` or \
                        `schedules` named it"
                    .into(),
            );
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
            // Its planned time counts as it is (a cron time in a daylight-saving gap is moved
            // to after the gap, where the pattern does not match); one older than the window
            // still fires if the pattern had a time within it.
            let in_window =
                s.next >= window || at_or_after(&s.when, s.next, window).is_some_and(|t| t <= now);
            if in_window {
                due.fires.push(Fire {
                    schedule: s.id.clone(),
                    creator: s.creator.clone(),
                    to: s.to.clone(),
                    body: s.body.clone(),
                    last_before: s.last,
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

    /// A fire [`Table::due`] gave was not sent: its schedule says it last fired when it did
    /// before (its next time stays as `due` moved it).
    pub fn unfired(&mut self, fire: &Fire) {
        if let Some(s) = self.schedules.iter_mut().find(|s| s.id == fire.schedule) {
            s.last = fire.last_before;
        }
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
        return Err(
            "`tz` goes with `cron` only (an `at` carries its offset, an `every` needs \
                    none)"
                .into(),
        );
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
        return Err(
            "missing `to` (a string): the actor that gets the message, such as \"agent\"".into(),
        );
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
    let parse = |pattern: &str| {
        croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(pattern)
    };
    parse(cron).map_err(|e| {
        // The library's words ("Number out of bounds") name no field: each field is tried
        // alone, the others `*`, and the first one refused is named with what it takes instead.
        let fields: Vec<&str> = cron.split_whitespace().collect();
        let wrong = (fields.len() == CRON_FIELDS.len())
            .then(|| {
                (0..fields.len()).find(|&n| {
                    let mut alone = ["*"; 5];
                    alone[n] = fields[n];
                    parse(&alone.join(" ")).is_err()
                })
            })
            .flatten();
        match wrong {
            Some(n) => {
                let (name, takes) = CRON_FIELDS[n];
                format!(
                    "`cron` {cron:?}: the {name} field `{}` is wrong; it takes {takes} (a \
                     pattern is {FIELDS}, such as \"*/15 * * * *\" or \"0 9 * * MON-FRI\")",
                    fields[n]
                )
            }
            None => format!(
                "`cron` {cron:?} is not a valid pattern ({e}); a pattern has 5 fields \
                 ({FIELDS}), such as \"*/15 * * * *\" or \"0 9 * * MON-FRI\""
            ),
        }
    })
}

/// The five fields of a cron pattern in order: each one's name and what it takes.
const CRON_FIELDS: [(&str, &str); 5] = [
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT (0 and 7 are Sunday)"),
];

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
            let mut found = cron
                .find_next_occurrence(&t.with_timezone(&tz), true)
                .ok()?;
            // In the hour a daylight-saving change repeats, croner answers a fixed time's first
            // occurrence, which may be before `t`: the next after that one is the answer (a
            // few tries at most, never a loop).
            for _ in 0..3 {
                if found >= t {
                    break;
                }
                found = cron.find_next_occurrence(&found, false).ok()?;
            }
            Some(found.with_timezone(&Utc)).filter(|found| *found >= t)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn t(text: &str) -> DateTime<Utc> {
        parse_time(text).unwrap()
    }

    fn known() -> BTreeSet<String> {
        ["agent", "console", "notes"]
            .into_iter()
            .map(String::from)
            .collect()
    }

    fn person(id: &str, owner: bool) -> Asker {
        Asker {
            creator: Creator {
                kind: CreatorKind::Person,
                id: id.into(),
            },
            all: owner,
            owner: Some(id.into()),
        }
    }

    fn actor(id: &str) -> Asker {
        Asker {
            creator: Creator {
                kind: CreatorKind::Actor,
                id: id.into(),
            },
            all: false,
            owner: None,
        }
    }

    fn owned_actor(id: &str, owner: &str) -> Asker {
        Asker {
            owner: Some(owner.into()),
            ..actor(id)
        }
    }

    /// A `schedule` request to `agent` with a text body and these fields.
    fn request(fields: Value) -> Value {
        let mut request =
            json!({"type": "schedule", "to": "agent", "body": {"type": "text", "text": "hi"}});
        for (k, v) in fields.as_object().unwrap() {
            request[k] = v.clone();
        }
        request
    }

    fn add(table: &mut Table, fields: Value, now: &str) -> Value {
        table
            .schedule(&person("ann", false), &request(fields), t(now), &known())
            .unwrap()
    }

    fn refused(fields: Value, now: &str) -> String {
        Table::default()
            .schedule(&person("ann", false), &request(fields), t(now), &known())
            .unwrap_err()
    }

    /// The boundary of the table: passes from `from` to `to` every `step` seconds in, the
    /// log of fires out (`<time> <schedule>`).
    fn run(table: &mut Table, from: &str, to: &str, step: i64) -> Vec<String> {
        let (mut now, end) = (t(from), t(to));
        let mut log = Vec::new();
        while now <= end {
            for fire in table.due(now).fires {
                log.push(format!("{} {}", format_time(now), fire.schedule));
            }
            now += TimeDelta::seconds(step);
        }
        log
    }

    #[test]
    fn a_cron_schedule_fires_at_its_times_and_is_described_in_words() {
        let mut table = Table::default();
        let reply = add(
            &mut table,
            json!({"cron": "0 9 * * *"}),
            "2026-01-10T08:00:00Z",
        );
        assert_eq!(reply["type"], "scheduled");
        assert_eq!(reply["id"], "s1");
        assert_eq!(reply["next"], "2026-01-10T09:00:00Z");
        let words = reply["description"].as_str().unwrap();
        assert!(words.contains('9'), "{words}");
        assert_eq!(
            run(
                &mut table,
                "2026-01-10T08:00:00Z",
                "2026-01-12T10:00:00Z",
                60
            ),
            [
                "2026-01-10T09:00:00Z s1",
                "2026-01-11T09:00:00Z s1",
                "2026-01-12T09:00:00Z s1"
            ]
        );
        let listed = &table.list(&person("ann", false))["schedules"][0];
        assert_eq!(listed["last"], "2026-01-12T09:00:00Z");
        assert_eq!(listed["next"], "2026-01-13T09:00:00Z");
        assert_eq!(listed["cron"], "0 9 * * *");
        assert_eq!(listed["creator"], "ann");
        assert_eq!(listed["creator_kind"], "person");
        assert!(listed.get("tz").is_none());
    }

    #[test]
    fn a_time_zone_keeps_the_local_hour_across_daylight_saving_changes() {
        // Berlin moves to summer time on 2026-03-29 (02:00 → 03:00) and back on 2026-10-25.
        let mut table = Table::default();
        let reply = add(
            &mut table,
            json!({"cron": "0 9 * * *", "tz": "Europe/Berlin"}),
            "2026-03-27T12:00:00Z",
        );
        assert_eq!(reply["next"], "2026-03-28T08:00:00Z");
        assert_eq!(
            run(
                &mut table,
                "2026-03-27T12:00:00Z",
                "2026-03-30T12:00:00Z",
                60
            ),
            [
                "2026-03-28T08:00:00Z s1",
                "2026-03-29T07:00:00Z s1",
                "2026-03-30T07:00:00Z s1"
            ]
        );

        // 02:30 does not exist on the day summer time starts, and exists twice on the day it
        // ends: the schedule fires once on each day all the same.
        let mut table = Table::default();
        add(
            &mut table,
            json!({"cron": "30 2 * * *", "tz": "Europe/Berlin"}),
            "2026-03-28T12:00:00Z",
        );
        let spring = run(
            &mut table,
            "2026-03-28T12:00:00Z",
            "2026-03-29T12:00:00Z",
            60,
        );
        assert_eq!(spring.len(), 1, "{spring:?}");
        let mut table = Table::default();
        add(
            &mut table,
            json!({"cron": "30 2 * * *", "tz": "Europe/Berlin"}),
            "2026-10-24T12:00:00Z",
        );
        let autumn = run(
            &mut table,
            "2026-10-24T12:00:00Z",
            "2026-10-25T12:00:00Z",
            60,
        );
        assert_eq!(autumn.len(), 1, "{autumn:?}");
    }

    #[test]
    fn every_keeps_its_grid_however_late_the_passes_come() {
        let mut table = Table::default();
        let reply = add(&mut table, json!({"every": 90}), "2026-01-10T10:00:00Z");
        assert_eq!(reply["next"], "2026-01-10T10:01:30Z");
        assert!(reply.get("description").is_none());
        // Passes every 7 s: each fire comes at the first pass after its time, and the times
        // after it stay on the 90 s grid, not 90 s after the pass.
        let log = run(
            &mut table,
            "2026-01-10T10:00:00Z",
            "2026-01-10T10:06:10Z",
            7,
        );
        assert_eq!(log.len(), 4, "{log:?}");
        let next = table.schedules()[0].next;
        assert_eq!((next - t("2026-01-10T10:00:00Z")).num_seconds() % 90, 0);
        assert_eq!(next, t("2026-01-10T10:07:30Z"));
    }

    #[test]
    fn an_at_fires_once_and_ends() {
        let mut table = Table::default();
        let reply = add(
            &mut table,
            json!({"at": "2026-01-10T11:30:00+01:00", "id": "tea"}),
            "2026-01-10T10:00:00Z",
        );
        assert_eq!(
            reply,
            json!({"type": "scheduled", "id": "tea", "next": "2026-01-10T10:30:00Z"})
        );
        assert_eq!(
            table.schedules()[0].when,
            When::At {
                at: "2026-01-10T10:30:00Z".into()
            }
        );
        assert_eq!(
            run(
                &mut table,
                "2026-01-10T10:00:00Z",
                "2026-01-10T12:00:00Z",
                60
            ),
            ["2026-01-10T10:30:00Z tea"]
        );
        assert!(table.schedules().is_empty());
    }

    #[test]
    fn a_fire_carries_the_body_the_recipient_and_the_creator() {
        let mut table = Table::default();
        table
            .schedule(
                &actor("notes"),
                &request(json!({"every": 60})),
                t("2026-01-10T10:00:00Z"),
                &known(),
            )
            .unwrap();
        let fires = table.due(t("2026-01-10T10:01:00Z")).fires;
        assert_eq!(
            fires,
            [Fire {
                schedule: "s1".into(),
                creator: actor("notes").creator,
                to: "agent".into(),
                body: json!({"type": "text", "text": "hi"}),
                last_before: None,
            }]
        );
    }

    #[test]
    fn each_bad_field_is_refused_with_what_would_be_right() {
        let now = "2026-01-10T10:00:00Z";
        let cases = [
            (json!({}), "needs one of `cron`"),
            (
                json!({"cron": "0 9 * * *", "every": 60}),
                "not `cron` and `every`",
            ),
            (json!({"cron": "0 9 * *"}), "has 4 fields; a pattern has 5"),
            (json!({"cron": "0 0 9 * * *"}), "has 6 fields; use 5"),
            (
                json!({"cron": "0 25 * * *"}),
                "the hour field `25` is wrong; it takes 0-23 (a pattern is minute,",
            ),
            (
                json!({"cron": "banana * * * *"}),
                "the minute field `banana` is wrong",
            ),
            (
                json!({"cron": "0 9 * 13 *"}),
                "the month field `13` is wrong",
            ),
            (
                json!({"cron": "0 9 * * 8"}),
                "the day-of-week field `8` is wrong",
            ),
            (json!({"cron": 9}), "must be a string of 5 fields"),
            (json!({"cron": "0 0 30 2 *"}), "never matches"),
            (
                json!({"cron": "0 9 * * *", "tz": "Europe/Berln"}),
                "not an IANA time zone; use a name such as Europe/Berlin",
            ),
            (
                json!({"every": 60, "tz": "UTC"}),
                "`tz` goes with `cron` only",
            ),
            (json!({"every": 59}), "the shortest is 60 s"),
            (json!({"every": "5m"}), "whole number of seconds"),
            (json!({"every": -60}), "whole number of seconds"),
            (json!({"at": "tomorrow"}), "not an RFC 3339 time"),
            (json!({"at": "2026-01-10T09:59:59Z"}), "is in the past"),
            (json!({"at": now}), "is in the past"),
            (json!({"every": 60, "to": "Agent!"}), "`to`: actor id"),
            (
                json!({"every": 60, "to": "ghost"}),
                "no actor `ghost`; known actors: agent, console, notes",
            ),
            (json!({"every": 60, "to": null}), "missing `to`"),
            (
                json!({"every": 60, "body": "hi"}),
                "`body` must be a JSON object",
            ),
            (json!({"every": 60, "body": null}), "missing `body`"),
            (
                json!({"every": 60, "body": {"type": "text", "text": "x".repeat(MAX_BODY_BYTES)}}),
                "at most 65536",
            ),
            (json!({"every": 60, "id": "Tea Time"}), "`id`: schedule id"),
            (json!({"every": 60, "id": 7}), "`id` must be a string"),
        ];
        for (fields, reason) in cases {
            let got = refused(fields.clone(), now);
            assert!(got.contains(reason), "{fields}: {got}");
        }
        // Nicknames are patterns too.
        let mut table = Table::default();
        assert_eq!(
            add(&mut table, json!({"cron": "@daily"}), now)["next"],
            "2026-01-11T00:00:00Z"
        );
    }

    #[test]
    fn a_creator_has_at_most_twenty_and_an_id_is_its_creators() {
        let now = "2026-01-10T10:00:00Z";
        let mut table = Table::default();
        for _ in 0..MAX_SCHEDULES_PER_CREATOR {
            add(&mut table, json!({"every": 60}), now);
        }
        let reason = table
            .schedule(
                &person("ann", false),
                &request(json!({"every": 60})),
                t(now),
                &known(),
            )
            .unwrap_err();
        assert!(
            reason.contains("person ann has 20 active schedules, the limit (20 per creator)"),
            "{reason}"
        );
        // Replacing one's own still works at the limit; someone else has their own twenty.
        add(&mut table, json!({"every": 120, "id": "s3"}), now);
        assert_eq!(table.schedules().len(), 20);
        assert_eq!(table.schedules()[2].when, When::Every { every: 120 });
        let reason = table
            .schedule(
                &person("bob", false),
                &request(json!({"every": 60, "id": "s3"})),
                t(now),
                &known(),
            )
            .unwrap_err();
        assert!(
            reason.contains("schedule s3 belongs to person ann; choose another `id`"),
            "{reason}"
        );
        table
            .schedule(
                &actor("ann"),
                &request(json!({"every": 60})),
                t(now),
                &known(),
            )
            .expect("the actor ann is another creator than the person ann");

        // Actors count against their owner: spawning more actors makes no more schedules.
        let mut table = Table::default();
        for n in 0..MAX_SCHEDULES_PER_CREATOR {
            let asker = owned_actor(&format!("a{}", n % 4), "bob");
            let every = request(json!({"every": 60}));
            table.schedule(&asker, &every, t(now), &known()).unwrap();
        }
        for asker in [owned_actor("fresh", "bob"), person("bob", false)] {
            let reason = table
                .schedule(&asker, &request(json!({"every": 60})), t(now), &known())
                .unwrap_err();
            assert!(
                reason.contains("bob has 20 active schedules with those of the actors bob owns"),
                "{reason}"
            );
        }
        table
            .schedule(
                &owned_actor("fresh", "carol"),
                &request(json!({"every": 60})),
                t(now),
                &known(),
            )
            .expect("carol has her own twenty");
    }

    #[test]
    fn only_the_creator_or_an_owner_ends_a_schedule_and_people_see_their_own() {
        let now = "2026-01-10T10:00:00Z";
        let mut table = Table::default();
        add(&mut table, json!({"every": 60}), now);
        table
            .schedule(
                &person("bob", false),
                &request(json!({"every": 60})),
                t(now),
                &known(),
            )
            .unwrap();
        let ids = |list: Value| -> Vec<String> {
            list["schedules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(ids(table.list(&person("ann", false))), ["s1"]);
        assert_eq!(ids(table.list(&person("bob", false))), ["s2"]);
        assert_eq!(ids(table.list(&person("olga", true))), ["s1", "s2"]);

        let unschedule = json!({"type": "unschedule", "id": "s1"});
        let reason = table
            .unschedule(&person("bob", false), &unschedule)
            .unwrap_err();
        assert!(reason.contains("only its creator or an owner"), "{reason}");
        assert_eq!(
            table
                .unschedule(&person("ann", false), &unschedule)
                .unwrap(),
            json!({"type": "unscheduled", "id": "s1"})
        );
        let reason = table
            .unschedule(&person("ann", false), &unschedule)
            .unwrap_err();
        assert!(reason.contains("no schedule s1"), "{reason}");
        assert!(
            table
                .unschedule(&person("ann", false), &json!({"type": "unschedule"}))
                .unwrap_err()
                .contains("missing `id`")
        );
        table
            .unschedule(
                &person("olga", true),
                &json!({"type": "unschedule", "id": "s2"}),
            )
            .unwrap();
        assert!(table.schedules().is_empty());
    }

    #[test]
    fn assigned_ids_are_never_reused_and_survive_the_file() {
        let now = "2026-01-10T10:00:00Z";
        let mut table = Table::default();
        add(&mut table, json!({"every": 60}), now);
        add(&mut table, json!({"every": 60, "id": "s2"}), now);
        assert_eq!(add(&mut table, json!({"every": 60}), now)["id"], "s3");
        table
            .unschedule(&person("ann", false), &json!({"id": "s3"}))
            .unwrap();
        let mut table: Table =
            serde_json::from_str(&serde_json::to_string(&table).unwrap()).unwrap();
        assert_eq!(add(&mut table, json!({"every": 60}), now)["id"], "s4");
        assert_eq!(table.schedules()[0].next, t("2026-01-10T10:01:00Z"));
    }

    #[test]
    fn after_downtime_each_schedule_fires_once_if_it_was_due_within_a_day() {
        let now = "2026-01-12T10:00:00Z"; // a Monday
        let mut table = Table::default();
        add(
            &mut table,
            json!({"cron": "0 * * * *", "id": "hourly"}),
            now,
        );
        add(&mut table, json!({"every": 60, "id": "minutely"}), now);
        add(
            &mut table,
            json!({"at": "2026-01-12T11:00:00Z", "id": "once"}),
            now,
        );
        add(
            &mut table,
            json!({"cron": "0 9 * * MON", "id": "weekly"}),
            now,
        );
        // Down for three hours: each missed schedule fires once, at the first pass.
        let fires: Vec<String> = table
            .due(t("2026-01-12T13:00:30Z"))
            .fires
            .into_iter()
            .map(|f| f.schedule)
            .collect();
        assert_eq!(fires, ["hourly", "minutely", "once"]);
        assert!(
            table.due(t("2026-01-12T13:00:30Z")).fires.is_empty(),
            "no burst"
        );
        assert_eq!(table.schedules()[0].next, t("2026-01-12T14:00:00Z"));
        assert_eq!(table.schedules()[1].next, t("2026-01-12T13:01:00Z"));

        // Down for three days: the hourly and the minutely ones were due within the last day,
        // the weekly one (Monday 9:00, three days ago) was not, and is skipped.
        let fires: Vec<String> = table
            .due(t("2026-01-19T08:00:00Z"))
            .fires
            .into_iter()
            .map(|f| f.schedule)
            .collect();
        assert_eq!(fires, ["hourly", "minutely"]);
        let weekly = table.schedules().iter().find(|s| s.id == "weekly").unwrap();
        assert_eq!(weekly.next, t("2026-01-19T09:00:00Z"));
        assert_eq!(weekly.last, None);

        // An `at` missed by more than a day ends without firing.
        let mut table = Table::default();
        add(&mut table, json!({"at": "2026-01-12T11:00:00Z"}), now);
        assert!(table.due(t("2026-01-13T11:00:01Z")).fires.is_empty());
        assert!(table.schedules().is_empty());
    }

    #[test]
    fn a_clock_that_jumps_gives_no_burst() {
        let now = "2026-01-12T10:00:00Z";
        let mut table = Table::default();
        add(&mut table, json!({"every": 3600, "id": "hourly"}), now);
        // Forwards by ten hours, with passes every 10 s after it: one late fire, then the grid.
        let log = run(
            &mut table,
            "2026-01-12T20:00:05Z",
            "2026-01-12T22:00:00Z",
            10,
        );
        assert_eq!(
            log,
            ["2026-01-12T20:00:05Z hourly", "2026-01-12T21:00:05Z hourly"]
        );
        // Backwards by a day: the next fire is planned again on the grid, within the hour.
        let due = table.due(t("2026-01-11T22:30:00Z"));
        assert!(due.fires.is_empty() && due.changed);
        assert_eq!(table.schedules()[0].next, t("2026-01-11T23:00:00Z"));
    }

    #[test]
    fn schedules_whose_actors_are_gone_end() {
        let now = "2026-01-10T10:00:00Z";
        let mut table = Table::default();
        add(&mut table, json!({"every": 60}), now);
        table
            .schedule(
                &actor("notes"),
                &request(json!({"every": 60, "to": "console"})),
                t(now),
                &known(),
            )
            .unwrap();
        let ended = table.end_where(|s| (s.creator.id == "notes").then(|| "gone".to_string()));
        assert_eq!(ended, [("s2".to_string(), "gone".to_string())]);
        assert_eq!(table.schedules().len(), 1);
    }
}
