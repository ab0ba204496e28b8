//! Goals (DESIGN §12) as the turn loop runs them: a `goal` request, `goal_stop`, one round (a
//! turn of up to `MAX_STEPS` steps in its person's conversation), and what its end makes of the
//! goal (`goal_progress`, then maybe `goal_done`, `goal_blocked` or `goal_stopped`). The goal
//! files themselves belong to `crate::goals`.

use super::*;

impl<H: Host> Agent<H> {
    /// `{"type":"goal","text","max_rounds"?,"max_usd"?}`: a new goal, answered `goal_started`;
    /// a goal works with its person's rights (an actor's: its owner's), so a guest, and an
    /// actor that acts for a guest or for nobody, may not start one.
    pub(super) fn new_goal(&mut self, message: Incoming, acting: &Acting) {
        if acting.tier == Tier::Guest {
            let reason = match (&message.person, &acting.person) {
                (None, Some(owner)) => format!(
                    "refused: actor {} acts for {owner}, a guest, and guests may not start \
                     goals; only members and owners (and their actors) may",
                    message.from
                ),
                (None, None) => format!(
                    "refused: actor {} acts for nobody, so it may not start goals; only members \
                     and owners (and their actors) may",
                    message.from
                ),
                (Some(person), _) => format!(
                    "refused: {person} is a guest, and guests may not start goals; only members \
                     and owners may"
                ),
            };
            return self.reply(
                &message,
                json!({"type": "error", "request": "goal", "reason": reason}),
            );
        }
        let by_actor = message.person.is_none();
        let added = goals::parse_request(&message.body).and_then(|(text, rounds, usd)| {
            self.goals.add(message.clone(), text, rounds, usd, by_actor)
        });
        let body = match added {
            Ok(goal) => {
                eprintln!("agent: goal {} from {}", goal.id, message.from);
                let mut body = json!({"type": "goal_started", "goal": goal.id});
                if goal.state == goals::State::Queued {
                    body["queued"] = json!(true);
                }
                body
            }
            Err(reason) => json!({"type": "error", "request": "goal", "reason": reason}),
        };
        self.reply(&message, body);
    }

    /// `{"type":"goal_stop","goal"}`: the goal ends; a round in progress ends after its step.
    /// Its person (or an actor acting for them), the actor that started it, or an owner (or an
    /// owner's actor) may stop it.
    pub(super) fn stop_goal(&mut self, message: Incoming, acting: &Acting) {
        let id = message.body["goal"].as_str().unwrap_or_default();
        let Some(mut goal) = self.goals.get(id) else {
            let known: Vec<String> = self.goals.all().into_iter().map(|g| g.id).collect();
            let reason = format!(
                "there is no goal `{id}`; the goals are: {}",
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            );
            return self.reply(
                &message,
                json!({"type": "error", "request": "goal_stop", "reason": reason}),
            );
        };
        let same_actor = goal.message.person.is_none()
            && message.person.is_none()
            && goal.message.from == message.from;
        let same_person = goal.message.person.is_some() && goal.message.person == acting.person;
        if !same_actor && !same_person && acting.tier != Tier::Owner {
            let reason =
                format!("refused: goal {id} is not yours; only its person or an owner may stop it");
            return self.reply(
                &message,
                json!({"type": "error", "request": "goal_stop", "reason": reason}),
            );
        }
        if goal.finished() {
            let reason = format!("goal {id} has already ended ({:?})", goal.state).to_lowercase();
            return self.reply(
                &message,
                json!({"type": "error", "request": "goal_stop", "reason": reason}),
            );
        }
        let reason = format!("stopped by {} (goal_stop)", message.from);
        goal.stop = Some(reason.clone());
        if self.round_of.as_deref() == Some(id) {
            // The round ends after its current step and reports the stop.
            self.stop_asked = true;
            self.report(self.goals.save(&goal));
        } else {
            self.stop_goal_because(&mut goal, reason.clone());
        }
        if message.from != goal.message.from {
            self.reply(
                &message,
                json!({"type": "goal_stopped", "goal": goal.id, "reason": reason}),
            );
        }
    }

    /// One round of `goal`: a turn of up to [`MAX_STEPS`] steps that ends with `goal_status`.
    pub(super) fn round(&mut self, mut goal: Goal) -> Flow {
        if let Some(reason) = goal.stop.clone() {
            self.stop_goal_because(&mut goal, reason);
            return Flow::Continue;
        }
        let config = match config::load(&self.file("config.json")) {
            Ok(config) => config,
            Err(words) => {
                self.stop_goal_because(&mut goal, words);
                return Flow::Continue;
            }
        };
        let mut message = goal.message.clone();
        message.body = json!({"type": "text", "text": goal.text});
        // A goal is its person's, or its actor's; one from before people finishes as it began.
        let conversation = match &message.person {
            Some(person) => Conversation::Person(person.clone()),
            None if goal.by_actor => Conversation::Actor(message.from.clone()),
            None => Conversation::Legacy,
        };
        let mut turn = SavedTurn {
            goal: Some(goal.id.clone()),
            plan: goal.plan.clone(),
            ..SavedTurn::new(message, conversation)
        };
        // An actor's goal works for its owner as they are at each round: one demoted to a
        // guest, or gone, ends it.
        let mut actors_history = None;
        if let Conversation::Actor(actor) = &turn.conversation {
            let mut history = self.load_history(&turn.conversation);
            let trace = turn.message.trace.clone();
            let Some(principal) = self.ask_principal(&mut history, actor, trace) else {
                return Flow::Stop;
            };
            let acting = Acting::of_principal(&principal);
            if acting.tier == Tier::Guest {
                let reason = match (&acting.person, &principal) {
                    (Some(owner), _) => format!(
                        "actor {actor} acts for {owner}, who is a guest now; goals are for \
                         members and owners"
                    ),
                    (None, Principal::Nobody { why }) => format!("{why}; goals need a person"),
                    (None, _) => format!("actor {actor} acts for nobody; goals need a person"),
                };
                self.stop_goal_because(&mut goal, reason);
                return Flow::Continue;
            }
            turn.principal = Some(principal);
            actors_history = Some(history);
        }
        if let Some(reason) = self.past_day_cap(&config, &turn) {
            self.stop_goal_because(&mut goal, reason);
            return Flow::Continue;
        }
        goal.state = goals::State::Running;
        self.report(self.goals.save(&goal));
        let round = goal.rounds + 1;
        eprintln!("agent: goal {} round {round}", goal.id);
        let mut history = match actors_history {
            Some(history) => history,
            None => self.load_history(&turn.conversation),
        };
        history.entries.extend(self.take_notes(&turn.conversation));
        let earlier: Vec<String> = goal
            .summaries
            .iter()
            .enumerate()
            .map(|(n, summary)| format!("- round {}: {summary}", n + 1))
            .collect();
        history.entries.push(Entry::user(format!(
            "Goal {} from {}, round {round} of at most {} ({} of {} spent so far):\n{}\n\n\
             Earlier rounds:\n{}\n\nWork on the goal in this round (up to {MAX_STEPS} steps): \
             keep the to-do card (plan) current, test each step. End the round with \
             goal_status: `continue` with what this round did and what comes next, `done` when \
             the goal is reached and tested, or `blocked` with what you need (allowed from round \
             {}).",
            goal.id,
            goal.message.from,
            goal.max_rounds,
            budget::usd_words(goal.spent_usd),
            budget::usd_words(goal.max_usd),
            goal.text,
            if earlier.is_empty() {
                "(none: this is the first)".to_string()
            } else {
                earlier.join("\n")
            },
            goals::BLOCKED_FROM_ROUND,
        )));
        self.work(&config, history, turn)
    }

    /// A round ended: `goal_progress`, then the goal goes on or ends (done, blocked, stopped by
    /// a stop, a limit, or a failure).
    pub(super) fn end_round(&mut self, turn: &mut SavedTurn, outcome: Outcome) {
        let id = turn.goal.clone().unwrap_or_default();
        let Some(mut goal) = self.goals.get(&id) else {
            eprintln!("agent: the goal {id} of this round is gone; its round's end is dropped");
            return;
        };
        goal.rounds += 1;
        goal.spent_usd += turn.cost_usd;
        goal.plan = turn.plan.clone();
        let (status, summary, ended) = match outcome {
            Outcome::Status => {
                let end = turn
                    .round_end
                    .take()
                    .expect("a status outcome carries its end");
                (end.status, end.summary, None)
            }
            Outcome::Answered(text) => ("continue".to_string(), text, None),
            Outcome::Cut(words, Some(Stopped::Steps)) => ("continue".to_string(), words, None),
            Outcome::Cut(words, _) => ("continue".to_string(), words.clone(), Some(words)),
        };
        goal.summaries.push(summary.clone());
        self.tell_goal_owner(
            &goal,
            json!({"type": "goal_progress", "goal": goal.id,
            "round": goal.rounds, "summary": summary}),
        );
        let stopped = |reason: String| {
            (
                goals::State::Stopped,
                "goal_stopped",
                json!({"reason": reason}),
            )
        };
        let (state, kind, fields) = if let Some(reason) = goal.stop.clone() {
            stopped(reason)
        } else if let Some(words) = ended {
            stopped(words)
        } else if status == "done" {
            (goals::State::Done, "goal_done", json!({"summary": summary}))
        } else if status == "blocked" {
            (
                goals::State::Blocked,
                "goal_blocked",
                json!({"summary": summary}),
            )
        } else if goal.rounds >= goal.max_rounds {
            stopped(format!(
                "it reached its limit of {} rounds (max_rounds)",
                goal.max_rounds
            ))
        } else if turn.cost_usd > 0.0 && goal.spent_usd >= goal.max_usd {
            stopped(format!(
                "it has cost {}, and its limit is {} (max_usd)",
                budget::usd_words(goal.spent_usd),
                budget::usd_words(goal.max_usd)
            ))
        } else {
            self.report(self.goals.save(&goal));
            return;
        };
        self.end_goal(&mut goal, state, kind, fields);
    }

    /// Ends `goal` as stopped, telling its owner why.
    pub(super) fn stop_goal_because(&mut self, goal: &mut Goal, reason: String) {
        self.end_goal(
            goal,
            goals::State::Stopped,
            "goal_stopped",
            json!({"reason": reason}),
        );
    }

    /// Ends `goal` in `state`, telling its owner with a `kind` message carrying `fields`.
    pub(super) fn end_goal(
        &mut self,
        goal: &mut Goal,
        state: goals::State,
        kind: &str,
        fields: Value,
    ) {
        goal.state = state;
        self.report(self.goals.save(goal));
        let mut body = json!({"type": kind, "goal": goal.id});
        for (key, value) in fields.as_object().into_iter().flatten() {
            body[key] = value.clone();
        }
        eprintln!("agent: goal {} ends: {kind}", goal.id);
        self.tell_goal_owner(goal, body);
    }

    pub(super) fn tell_goal_owner(&mut self, goal: &Goal, body: Value) {
        let message = goal.message.clone();
        self.reply(&message, body);
    }

    /// `goal_status`: ends the round, unless it gives up before [`goals::BLOCKED_FROM_ROUND`].
    pub(super) fn goal_status(&mut self, turn: &mut SavedTurn, arguments: &Value) -> String {
        let Some(id) = turn.goal.clone() else {
            return "error: goal_status ends a goal's round, and this turn answers a message: \
                    end it with your answer instead"
                .into();
        };
        let status = match arguments["status"].as_str() {
            Some(s @ ("continue" | "done" | "blocked")) => s.to_string(),
            other => {
                return format!(
                    "error: `status` is {other:?}; it must be \"continue\", \"done\" or \"blocked\""
                );
            }
        };
        let summary = match arguments["summary"].as_str().map(str::trim) {
            Some(summary) if !summary.is_empty() => summary.to_string(),
            _ => {
                return "error: `summary` must say what this round did (and what comes next)"
                    .into();
            }
        };
        let round = self.goals.get(&id).map_or(1, |g| g.rounds + 1);
        if status == "blocked" && round < goals::BLOCKED_FROM_ROUND {
            return format!(
                "error: this is round {round}; a goal may be given up as blocked only from round \
                 {} on. Keep going: try another way (a smaller step, a different approach, \
                 reading the logs and sources again), or ask the person with `ask` if only they \
                 can decide. The round goes on.",
                goals::BLOCKED_FROM_ROUND
            );
        }
        turn.round_end = Some(RoundEnd {
            status: status.clone(),
            summary,
        });
        format!("round {round} of goal {id} ends here ({status})")
    }
}
