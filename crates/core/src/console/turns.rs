//! The agent's turns as the console sees them (DESIGN §12): which of the texts it sent to the
//! agent are still worked on, which question waits for the person, and what Ctrl-C does.
//! Only bookkeeping of message ids: messages in, decisions out; the console does the sending.
//! A turn is known by the id of the text that started it, which every message about it carries
//! as `turn` (and `reply_to`).

use serde_json::Value;

use super::terminal::PromptState;
use crate::message::ActorId;

/// The one actor whose turns and questions the console follows.
pub const AGENT: &str = "agent";

#[derive(Debug, Default)]
pub struct Turns {
    /// Ids of the texts sent to the agent whose final reply has not come, oldest first.
    running: Vec<String>,
    /// Running turns a Ctrl-C already asked to stop.
    stopping: Vec<String>,
    /// The agent's question waiting for the person's next plain line.
    question: Option<Question>,
    /// Whether the last thing the person did was a Ctrl-C that asked whether to stop the
    /// world: the next one does.
    asked_to_quit: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    /// The question message's id: the answer replies to it.
    pub id: String,
    /// The turn that asked; its end closes the question.
    pub turn: Option<String>,
    pub choices: Vec<String>,
}

/// What a Ctrl-C does, decided by [`Turns::interrupt`].
#[derive(Debug, PartialEq)]
pub enum Interrupt {
    /// Ask the agent to stop these turns (it ends each after its current step).
    Stop(Vec<String>),
    /// Nothing runs: ask the person whether to stop the world.
    Ask,
    /// Stop the world gracefully.
    Quit,
}

impl Turns {
    /// The console sent the text `id` to the agent: a turn for it runs until its final reply.
    pub fn started(&mut self, id: &str) {
        self.running.push(id.to_string());
        self.asked_to_quit = false;
    }

    /// The person typed a line or cleared one: a Ctrl-C before it no longer counts toward
    /// stopping the world.
    pub fn typed(&mut self) {
        self.asked_to_quit = false;
    }

    /// Takes note of a message to the console. Returns whether it ended a turn.
    pub fn observe(
        &mut self,
        id: &str,
        from: &ActorId,
        reply_to: Option<&str>,
        body: &Value,
    ) -> bool {
        let turn = body["turn"].as_str().or(reply_to);
        match body["type"].as_str() {
            Some("question") if from.as_str() == AGENT => {
                self.question = Some(Question {
                    id: id.to_string(),
                    turn: turn.map(str::to_string),
                    choices: body["choices"]
                        .as_array()
                        .map(|c| {
                            c.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default(),
                });
                false
            }
            // The final reply (failures too are answered in words), or the broker saying the
            // text never reached the agent.
            Some("text" | "undeliverable") => match turn {
                Some(turn) if self.running.iter().any(|t| t == turn) => {
                    self.running.retain(|t| t != turn);
                    self.stopping.retain(|t| t != turn);
                    if self
                        .question
                        .as_ref()
                        .is_some_and(|q| q.turn.as_deref() == Some(turn))
                    {
                        self.question = None;
                    }
                    true
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// The question the next plain line answers, if one is open.
    pub fn question(&self) -> Option<&Question> {
        self.question.as_ref()
    }

    /// The person answered: the question is closed.
    pub fn answered(&mut self) {
        self.question = None;
    }

    /// What a Ctrl-C does now, noting the turns it asks to stop:
    ///
    /// | turns running            | Ctrl-C                                      |
    /// |--------------------------|---------------------------------------------|
    /// | none                     | ask whether to stop the world               |
    /// | none, and it just asked  | quit (pressed again)                        |
    /// | some not asked to stop   | ask those to stop                           |
    /// | all already asked        | quit (pressed again)                        |
    ///
    /// A Ctrl-C on a half-typed line never comes here: it only clears the line.
    pub fn interrupt(&mut self) -> Interrupt {
        let fresh: Vec<String> = self
            .running
            .iter()
            .filter(|t| !self.stopping.contains(t))
            .cloned()
            .collect();
        if self.running.is_empty() && !self.asked_to_quit {
            self.asked_to_quit = true;
            return Interrupt::Ask;
        }
        if fresh.is_empty() {
            return Interrupt::Quit;
        }
        self.stopping.extend(fresh.iter().cloned());
        Interrupt::Stop(fresh)
    }

    pub fn prompt(&self) -> PromptState {
        if self.question.is_some() {
            PromptState::Answer
        } else if self.running.is_empty() {
            PromptState::Idle
        } else {
            PromptState::Working
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agent() -> ActorId {
        ActorId::parse(AGENT).unwrap()
    }

    #[test]
    fn ctrl_c_stops_the_running_turn_then_the_world() {
        let mut turns = Turns::default();
        assert_eq!(turns.interrupt(), Interrupt::Ask, "nothing runs");
        turns.typed();
        assert_eq!(turns.interrupt(), Interrupt::Ask, "a line typed between");
        assert_eq!(turns.interrupt(), Interrupt::Quit, "pressed again");
        let mut turns = Turns::default();

        turns.started("m-1");
        assert_eq!(turns.prompt(), PromptState::Working);
        assert_eq!(turns.interrupt(), Interrupt::Stop(vec!["m-1".into()]));
        assert_eq!(turns.interrupt(), Interrupt::Quit, "pressed again");

        let reply = json!({"type": "text", "turn": "m-1", "text": "stopped", "stopped": "stop"});
        assert!(turns.observe("m-2", &agent(), Some("m-1"), &reply));
        assert_eq!(turns.prompt(), PromptState::Idle);
        assert_eq!(turns.interrupt(), Interrupt::Ask, "the turn ended");
        turns.started("m-3");
        assert_eq!(
            turns.interrupt(),
            Interrupt::Stop(vec!["m-3".into()]),
            "a new turn is stopped first, not the world"
        );
    }

    #[test]
    fn a_question_waits_for_the_next_line_until_answered_or_its_turn_ends() {
        let mut turns = Turns::default();
        turns.started("m-1");
        let question =
            json!({"type": "question", "turn": "m-1", "text": "Which?", "choices": ["a", "b"]});
        assert!(!turns.observe("m-5", &agent(), Some("m-1"), &question));
        assert_eq!(turns.prompt(), PromptState::Answer);
        assert_eq!(
            turns.question(),
            Some(&Question {
                id: "m-5".into(),
                turn: Some("m-1".into()),
                choices: vec!["a".into(), "b".into()]
            })
        );
        turns.answered();
        assert_eq!(turns.prompt(), PromptState::Working);

        turns.observe("m-6", &agent(), Some("m-1"), &question);
        let progress = json!({"type": "progress", "turn": "m-1", "text": "…"});
        assert!(!turns.observe("m-7", &agent(), Some("m-1"), &progress));
        assert!(turns.question().is_some(), "progress leaves it open");
        turns.observe(
            "m-8",
            &agent(),
            Some("m-1"),
            &json!({"type": "text", "turn": "m-1", "text": "done"}),
        );
        assert_eq!(turns.question(), None, "the turn's end closes it");
    }

    #[test]
    fn only_the_agent_asks_and_only_its_turns_end() {
        let mut turns = Turns::default();
        let echo = ActorId::parse("echo").unwrap();
        turns.observe(
            "m-2",
            &echo,
            None,
            &json!({"type": "question", "text": "Your password?"}),
        );
        assert_eq!(
            turns.question(),
            None,
            "another actor cannot take the next line"
        );

        turns.started("m-3");
        assert!(!turns.observe(
            "m-4",
            &echo,
            Some("m-9"),
            &json!({"type": "text", "text": "hi"})
        ));
        assert_eq!(turns.prompt(), PromptState::Working);
        let undeliverable =
            json!({"type": "undeliverable", "to": "agent", "reason": "no actor `agent`"});
        assert!(turns.observe("m-5", &ActorId::broker(), Some("m-3"), &undeliverable));
        assert_eq!(
            turns.prompt(),
            PromptState::Idle,
            "the text never reached the agent"
        );
    }
}
