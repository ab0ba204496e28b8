//! The agent's open questions to people on the web (DESIGN §12, §18): an answer counts only
//! from a person the question was put to, and only while it is open.
//! A question opens when `agent` sends `web` a `question` for a person (its `for`; in a room
//! every member gets one under the same id), and closes when one of them answers it from the
//! web or when its turn ends (the agent's final `text` of that turn). At most
//! [`OPEN_QUESTIONS`], the oldest forgotten first; kept in `broker/web/questions.json` after
//! each change, so a question the agent still waits for across a restart can be answered.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

/// The most open questions remembered; past it the oldest is forgotten (answering it is then
/// refused like answering an unknown one).
pub const OPEN_QUESTIONS: usize = 10_000;

#[derive(Default, Serialize, Deserialize)]
pub struct Questions {
    /// Question id → who may answer it and the turn it belongs to.
    open: HashMap<String, Question>,
    /// Question ids, oldest first; ids already closed are skipped when the oldest goes.
    order: VecDeque<String>,
}

#[derive(Serialize, Deserialize)]
struct Question {
    people: Vec<String>,
    turn: Option<String>,
}

impl Questions {
    /// The questions a run saved in `bytes`; none when they cannot be read (answering one is
    /// then refused until the agent asks again).
    pub fn load(bytes: &[u8]) -> Questions {
        serde_json::from_slice(bytes).unwrap_or_default()
    }

    /// What [`Questions::load`] reads back.
    pub fn save(&self) -> Vec<u8> {
        // Strings and lists of strings always serialise.
        serde_json::to_vec(self).expect("questions serialise")
    }

    /// Notes that the agent asked `person` question `id` in `turn`.
    pub fn asked(&mut self, id: &str, person: &str, turn: Option<&str>) {
        if let Some(question) = self.open.get_mut(id) {
            if !question.people.iter().any(|p| p == person) {
                question.people.push(person.to_string());
            }
            return;
        }
        if self.order.len() >= OPEN_QUESTIONS
            && let Some(oldest) = self.order.pop_front()
        {
            self.open.remove(&oldest);
        }
        self.order.push_back(id.to_string());
        self.open.insert(
            id.to_string(),
            Question {
                people: vec![person.to_string()],
                turn: turn.map(str::to_string),
            },
        );
    }

    /// Closes every question of `turn`: it ended.
    pub fn turn_ended(&mut self, turn: &str) {
        self.open
            .retain(|_, question| question.turn.as_deref() != Some(turn));
    }

    /// Closes question `id` for `person`'s answer; `Err` says why it cannot be answered.
    pub fn answer(&mut self, id: &str, person: &str) -> Result<(), String> {
        match self.open.get(id) {
            Some(question) if question.people.iter().any(|p| p == person) => {
                self.open.remove(id);
                Ok(())
            }
            _ => Err(format!(
                "question `{id}`: {person} has no open question with this id (it was answered \
                 already, its turn ended, or it was put to someone else); answer a question \
                 your page shows"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_is_answered_once_by_a_person_it_was_put_to_while_its_turn_runs() {
        let mut questions = Questions::default();
        questions.asked("agent/ann.q1", "ann", Some("web/1"));
        questions.asked("agent/room.q2", "ann", Some("web/2"));
        questions.asked("agent/room.q2", "bob", Some("web/2"));
        questions.asked("agent/ann.q3", "ann", Some("web/3"));

        let refused = questions.answer("agent/ann.q1", "bob").unwrap_err();
        assert!(refused.contains("bob has no open question"), "{refused}");
        assert!(questions.answer("agent/nothing", "ann").is_err());
        assert_eq!(questions.answer("agent/ann.q1", "ann"), Ok(()));
        assert!(questions.answer("agent/ann.q1", "ann").is_err(), "once");

        assert_eq!(questions.answer("agent/room.q2", "bob"), Ok(()), "a member");
        assert!(
            questions.answer("agent/room.q2", "ann").is_err(),
            "answered by another member"
        );

        let back = Questions::load(&questions.save());
        assert_eq!(
            back.open.len(),
            questions.open.len(),
            "kept across a restart"
        );
        questions.turn_ended("web/3");
        assert!(
            questions.answer("agent/ann.q3", "ann").is_err(),
            "its turn ended"
        );
    }

    #[test]
    fn the_oldest_questions_are_forgotten_past_the_limit() {
        let mut questions = Questions::default();
        for n in 0..OPEN_QUESTIONS + 1 {
            questions.asked(&format!("q{n}"), "ann", None);
        }
        assert_eq!(questions.open.len(), OPEN_QUESTIONS);
        assert!(questions.answer("q0", "ann").is_err());
        assert_eq!(
            questions.answer(&format!("q{OPEN_QUESTIONS}"), "ann"),
            Ok(())
        );
    }
}
