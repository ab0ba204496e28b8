//! Goals (DESIGN §12, Goals): work that carries on in rounds, each a turn of up to 40 steps, kept
//! in `/data/goals/<id>.json` so it survives restarts and upgrades of the agent. This module
//! owns those files and the rules a goal's request and its end must follow; the turn loop runs
//! the rounds and decides when.
//! **Invariant:** at most one goal runs: the oldest unfinished one; later ones wait, queued.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::Incoming;

/// `max_rounds` when the goal names none.
pub const DEFAULT_MAX_ROUNDS: u32 = 24;

/// The most rounds a goal may ask for: a goal is not a way round every limit.
pub const MAX_ROUNDS: u32 = 200;

/// `max_usd` when the goal names none.
pub const DEFAULT_MAX_USD: f64 = 5.0;

/// A goal may be given up as blocked only from this round on; before, the agent is told to try
/// another way.
pub const BLOCKED_FROM_ROUND: u32 = 3;

/// Where a goal stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Waiting for the goal before it to end.
    Queued,
    Running,
    Done,
    Blocked,
    Stopped,
}

/// One goal, as its file keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    /// `g<n>`, unique in this agent's `/data`.
    pub id: String,
    pub text: String,
    /// The `goal` message: its sender gets every message about the goal, replying to its id.
    pub message: Incoming,
    pub max_rounds: u32,
    pub max_usd: f64,
    /// Rounds finished.
    #[serde(default)]
    pub rounds: u32,
    /// What the rounds cost, for the models that have a price.
    #[serde(default)]
    pub spent_usd: f64,
    pub state: State,
    /// Each finished round's summary, in order.
    #[serde(default)]
    pub summaries: Vec<String>,
    /// The to-do card as the last round left it.
    #[serde(default)]
    pub plan: Value,
    /// A `goal_stop` came: why, for the `goal_stopped` message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<String>,
    /// An actor asked for it (the message names no person): its rounds run in that actor's
    /// conversation, for its owner as the broker names them at each round (DESIGN §18). False
    /// for a person's goal, and for one from before people, which runs as it began.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_actor: bool,
}

impl Goal {
    pub fn finished(&self) -> bool {
        matches!(self.state, State::Done | State::Blocked | State::Stopped)
    }
}

/// A `goal` request's fields, checked; the reason says what would be right.
pub fn parse_request(body: &Value) -> Result<(String, u32, f64), String> {
    let text = match body["text"].as_str().map(str::trim) {
        Some(text) if !text.is_empty() => text.to_string(),
        _ => {
            return Err(
                "a goal needs `text`: what to reach, in words (such as {\"type\":\"goal\",\"text\":\"a \
                 counter actor with tests\"})"
                    .into(),
            );
        }
    };
    let max_rounds = match &body["max_rounds"] {
        Value::Null => DEFAULT_MAX_ROUNDS,
        v => v
            .as_u64()
            .filter(|n| (1..=u64::from(MAX_ROUNDS)).contains(n))
            .map(|n| n as u32)
            .ok_or_else(|| {
                format!("max_rounds is {v}; give a whole number from 1 to {MAX_ROUNDS}")
            })?,
    };
    let max_usd = match &body["max_usd"] {
        Value::Null => DEFAULT_MAX_USD,
        v => v
            .as_f64()
            .filter(|usd| usd.is_finite() && *usd > 0.0)
            .ok_or_else(|| format!("max_usd is {v}; give a positive number of US dollars"))?,
    };
    Ok((text, max_rounds, max_usd))
}

/// The goals in `/data/goals/`.
pub struct Goals {
    dir: PathBuf,
}

impl Goals {
    pub fn new(data: &Path) -> Goals {
        Goals {
            dir: data.join("goals"),
        }
    }

    /// Every goal, oldest first. A file that cannot be read is left where it is and named on
    /// stderr; it never stops the others.
    pub fn all(&self) -> Vec<Goal> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut goals: Vec<Goal> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|e| {
                let bytes = std::fs::read(e.path()).ok()?;
                serde_json::from_slice(&bytes)
                    .map_err(|err| eprintln!("agent: {}: not a goal: {err}", e.path().display()))
                    .ok()
            })
            .collect();
        goals.sort_by_key(|g| number(&g.id));
        goals
    }

    pub fn get(&self, id: &str) -> Option<Goal> {
        self.all().into_iter().find(|g| g.id == id)
    }

    /// The goal that runs now: the oldest unfinished one.
    pub fn active(&self) -> Option<Goal> {
        self.all().into_iter().find(|g| !g.finished())
    }

    /// A new goal, running if none is, else queued behind the one that is.
    pub fn add(
        &self,
        message: Incoming,
        text: String,
        max_rounds: u32,
        max_usd: f64,
        by_actor: bool,
    ) -> Result<Goal, String> {
        let all = self.all();
        let next = all.iter().map(|g| number(&g.id)).max().unwrap_or(0) + 1;
        let running = all.iter().any(|g| !g.finished());
        let goal = Goal {
            id: format!("g{next}"),
            text,
            message,
            max_rounds,
            max_usd,
            rounds: 0,
            spent_usd: 0.0,
            state: if running {
                State::Queued
            } else {
                State::Running
            },
            summaries: Vec::new(),
            plan: Value::Null,
            stop: None,
            by_actor,
        };
        self.save(&goal)?;
        Ok(goal)
    }

    pub fn save(&self, goal: &Goal) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let path = self.dir.join(format!("{}.json", goal.id));
        // A goal holds strings, numbers and JSON values only.
        let text = serde_json::to_string_pretty(goal).expect("a goal serialises");
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The number in a goal id (`g12` → 12), for ordering.
fn number(id: &str) -> u64 {
    id.trim_start_matches('g').parse().unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(id: &str) -> Incoming {
        Incoming {
            id: id.into(),
            from: "console".into(),
            body: json!({"type": "goal", "text": "x"}),
            ..Incoming::default()
        }
    }

    #[test]
    fn a_request_is_checked_field_by_field() {
        assert_eq!(
            parse_request(&json!({"type": "goal", "text": " a counter "})).unwrap(),
            ("a counter".to_string(), DEFAULT_MAX_ROUNDS, DEFAULT_MAX_USD)
        );
        assert_eq!(
            parse_request(&json!({"text": "a", "max_rounds": 3, "max_usd": 0.5})).unwrap(),
            ("a".to_string(), 3, 0.5)
        );
        let no_text = parse_request(&json!({"type": "goal"})).unwrap_err();
        assert!(no_text.contains("needs `text`"), "{no_text}");
        assert!(parse_request(&json!({"text": "  "})).is_err());
        for rounds in [json!(0), json!(-1), json!(1.5), json!("3"), json!(100_000)] {
            let e = parse_request(&json!({"text": "a", "max_rounds": rounds})).unwrap_err();
            assert!(e.starts_with("max_rounds is"), "{e}");
        }
        for usd in [json!(0), json!(-2), json!("5")] {
            let e = parse_request(&json!({"text": "a", "max_usd": usd})).unwrap_err();
            assert!(e.starts_with("max_usd is"), "{e}");
        }
    }

    #[test]
    fn one_goal_runs_and_the_next_waits_in_order() {
        let goals = Goals::new(&crate::testing::temp_dir("goals"));
        assert!(goals.active().is_none());
        let first = goals
            .add(message("m-1"), "one".into(), 3, 1.0, false)
            .unwrap();
        let second = goals
            .add(message("m-2"), "two".into(), 3, 1.0, false)
            .unwrap();
        assert_eq!((first.id.as_str(), first.state), ("g1", State::Running));
        assert_eq!((second.id.as_str(), second.state), ("g2", State::Queued));
        assert_eq!(goals.active().unwrap().id, "g1");
        let mut done = first;
        done.state = State::Done;
        goals.save(&done).unwrap();
        assert_eq!(goals.active().unwrap().id, "g2");
        // Ten goals later, `g10` still sorts after `g9`.
        for n in 3..=10 {
            goals
                .add(message(&format!("m-{n}")), "more".into(), 1, 1.0, false)
                .unwrap();
        }
        let ids: Vec<String> = goals.all().into_iter().map(|g| g.id).collect();
        assert_eq!(ids.last().unwrap(), "g10");
    }
}
