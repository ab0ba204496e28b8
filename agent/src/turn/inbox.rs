//! What arrives outside a wait: texts queued for their turns (if their sender may have one),
//! the requests about the agent itself (stop, goals, conversation, rooms, memory), answered at
//! once, and every other message kept for its conversation in `inbox.json`. An `answer` no open
//! question took is refused to its sender, and a reply to the agent's message from an actor it
//! did not go to is dropped (DESIGN §18, bound answers).
//!
//! The requests that a tier decides ([`BY_TIER`]) act for an actor's owner with the owner's tier
//! (DESIGN §18), as its turns do: an actor's waits in `inbox.json` until the broker's
//! `principal` names its owner, and is answered then, so no wait nests in another. The others
//! are about whose data it is, not what a tier may do: an actor's `conversation` is its own,
//! and memory, rooms and answers are people's.
//! **Invariant:** a kept message is shown only in the conversation it belongs to; a refused
//! answer changes nothing, on disk neither.

use super::*;

/// The requests to the agent that a tier decides: who may stop a turn or a goal, rewind a
/// turn, start a goal, or make a room.
const BY_TIER: [&str; 5] = ["stop", "rewind", "goal", "goal_stop", "room"];

impl<H: Host> Agent<H> {
    /// Keeps a message that does not belong to the current wait: a text for its own turn (if
    /// its sender may have one now), any other for its conversation's model to see later.
    /// Requests about the agent itself (stop, goals, conversation, rooms, memory) are answered
    /// instead of kept.
    pub(super) fn keep(&mut self, message: Incoming) {
        if spans::is_answer(&message) {
            if message.kind() == "error" {
                eprintln!(
                    "agent: the broker refused a turn's spans: {}",
                    message.body["reason"]
                        .as_str()
                        .unwrap_or("it gave no reason")
                );
            }
            return;
        }
        if message.kind() == "answer" {
            // An open question's answer ended its wait before coming here: this one is not it.
            let open = self.asking.as_ref().map(|(id, c)| (id.as_str(), c));
            let reason = access::answer_refusal(open, &message);
            eprintln!(
                "agent: an answer from {} is not taken: {reason}",
                message.from
            );
            let body = json!({"type": "error", "request": "answer", "reason": reason});
            return self.reply(&message, body);
        }
        if let Some(to) = self.sent_to(&message)
            && !access::is_reply_of(&to, &message)
        {
            eprintln!(
                "agent: {} replied to {}, which went to {to}; dropped",
                message.from,
                message.reply_to.as_deref().unwrap_or_default()
            );
            return;
        }
        if let Some((request, principal)) = self.owner_named(&message) {
            return self.answer_by_tier(request, Acting::of_principal(&principal));
        }
        let heard = self.surfaces.heard(&self.data, &message);
        self.report(heard);
        match message.kind() {
            kind if BY_TIER.contains(&kind) => {
                if message.person.is_some() {
                    let acting = Acting::of_person(&message);
                    return self.answer_by_tier(message, acting);
                }
                return self.ask_owner(message);
            }
            "conversation" => return self.tell_conversation(&message),
            "rooms" => {
                let body = conversations::rooms_request(&self.data, &message);
                return self.reply(&message, body);
            }
            "memory" | "forget" => {
                let body = conversations::memory_request(&self.data, &message);
                return self.reply(&message, body);
            }
            _ => {}
        }
        if message.starts_turn() {
            if let Some(words) = self.not_admitted(&message) {
                return self.refuse_turn(&message, words, None);
            }
            self.inbox.turns.push(message);
        } else {
            // A message that names no conversation is a publication for the conversation that
            // subscribed to its sender; else, during a turn, what that turn may be waiting for;
            // idle, it is its actor's.
            let unnamed = message.person.is_none() && message.reply_to.is_none();
            let conversation = match (self.subscriptions.of(&message.from), &self.running) {
                (Some(subscribed), _) if unnamed => subscribed.clone(),
                (None, Some((running, _))) if unnamed => running.clone(),
                _ => Conversation::of_note(&message, &self.actor),
            };
            self.keep_note(message, conversation);
        }
        self.save_inbox();
    }

    /// Answers a request of [`BY_TIER`] for whom it acts for.
    fn answer_by_tier(&mut self, message: Incoming, acting: Acting) {
        match message.kind() {
            "stop" => self.obey_stop(message, &acting),
            "rewind" => self.rewind(message, &acting),
            "goal" => self.new_goal(message, &acting),
            "goal_stop" => self.stop_goal(message, &acting),
            _ => {
                let body = conversations::room_request(&self.data, &message, acting.tier);
                self.reply(&message, body);
            }
        }
    }

    /// Asks the broker whom the actor that sent `request` acts for, keeping the request until
    /// it answers ([`Agent::owner_named`]). A native actor's, or any in a candidate (which asks
    /// nobody), acts for nobody at once.
    fn ask_owner(&mut self, request: Incoming) {
        if self.candidate || access::is_native(&request.from) {
            return self.answer_by_tier(request, Acting::NOBODY);
        }
        if self.inbox.owners_asked.len() >= MAX_OWNERS_ASKED {
            let reason = format!(
                "the agent is busy: {MAX_OWNERS_ASKED} requests from actors wait for the broker                  to say whom they act for; ask again in a moment"
            );
            let body = json!({"type": "error", "request": request.kind(), "reason": reason});
            return self.reply(&request, body);
        }
        // Message ids are unique in a world, so this one is too, across restarts.
        let id = format!("owner.{}", request.id);
        let published = format!("{}/{id}", self.actor);
        self.remember_sent(&published, "broker");
        self.inbox.owners_asked.push((published, request.clone()));
        self.save_inbox();
        self.send(Outgoing {
            to: Some("broker".into()),
            id: Some(id),
            reply_to: None,
            speaks_for: None,
            trace: request.trace.clone(),
            body: json!({"type": "principal", "actor": request.from}),
        });
    }

    /// When `message` is the broker's answer about a request kept by [`Agent::ask_owner`]: that
    /// request, taken from the inbox, and whom the broker said its actor acts for.
    fn owner_named(&mut self, message: &Incoming) -> Option<(Incoming, Principal)> {
        let reply_to = message.reply_to.as_deref()?;
        if message.from != "broker" {
            return None;
        }
        let at = (self.inbox.owners_asked.iter()).position(|(id, _)| id == reply_to)?;
        let (_, request) = self.inbox.owners_asked.remove(at);
        self.save_inbox();
        let principal = Principal::of_reply(&request.from, message);
        Some((request, principal))
    }

    /// The actor the agent's message that `message` replies to went to, if it is remembered.
    fn sent_to(&self, message: &Incoming) -> Option<String> {
        let reply_to = message.reply_to.as_deref()?;
        self.inbox
            .sent
            .iter()
            .rev()
            .find(|(id, _)| id == reply_to)
            .map(|(_, to)| to.clone())
    }

    /// Keeps `message` for `conversation`, at most [`MAX_KEPT_NOTES`] of them.
    pub(super) fn keep_note(&mut self, message: Incoming, conversation: Conversation) {
        let same: Vec<usize> = (0..self.inbox.notes.len())
            .filter(|&n| self.conversation_of(&self.inbox.notes[n]) == conversation)
            .collect();
        if same.len() >= MAX_KEPT_NOTES {
            let dropped = self.inbox.notes.remove(same[0]);
            eprintln!(
                "agent: {} kept messages wait for {}; the oldest ({} from {}) is dropped",
                same.len(),
                conversation.tag(),
                dropped.message.id,
                dropped.message.from
            );
        }
        self.inbox.notes.push(Kept {
            message,
            conversation: Some(conversation),
        });
    }

    /// Why a text may not wait for a turn, in words: a room it may not speak in, or its sender's
    /// hourly limit (DESIGN §13); `None` when it may.
    pub(super) fn not_admitted(&self, message: &Incoming) -> Option<String> {
        if let Err(words) = Conversation::of_text(message, &self.data) {
            return Some(format!("I cannot take this: {words}."));
        }
        let limit = fairness::turns_per_hour(message.tier())?;
        let sender = fairness::sender(message);
        let queued = self
            .inbox
            .turns
            .iter()
            .filter(|m| fairness::sender(m) == sender)
            .count();
        let now = unix_seconds(self.host.now());
        let wait = self.starts.wait(&sender, limit, queued, now)?;
        Some(format!(
            "You have asked {limit} times within the last hour, the most {} may; so that \
             everyone gets their turn, you may ask again in {}.",
            message.tier().a(),
            budget::duration_words(wait)
        ))
    }

    /// `{"type":"conversation","room"?}`: the asker's conversation (or a room they are in) as
    /// a person reads it (see [`conversation`]), answered at once when idle, and at the next
    /// step during a turn.
    pub(super) fn tell_conversation(&mut self, message: &Incoming) {
        let body = match Conversation::of_text(message, &self.data) {
            Err(reason) => json!({"type": "error", "request": "conversation", "reason": reason}),
            Ok(asked) => {
                if let (Conversation::Person(person), Tier::Owner, None) =
                    (&asked, message.tier(), &self.current)
                {
                    self.report(conversations::adopt_legacy(&self.data, person).map(|_| ()));
                }
                match history::load(&asked.history(&self.data)) {
                    Ok(history) => {
                        let mut entries = conversation(&history);
                        // A turn that changed an actor or a file has a checkpoint to rewind.
                        for entry in &mut entries {
                            if let Some(id) = entry["id"].as_str() {
                                let kept = super::rewind::load(&self.data, id).is_some();
                                entry["rewindable"] = json!(kept);
                            }
                        }
                        json!({"type": "conversation", "entries": entries})
                    }
                    Err(e) => json!({
                        "type": "error", "request": "conversation",
                        "reason": format!("the conversation cannot be read: {e}"),
                    }),
                }
            }
        };
        self.reply(message, body);
    }

    /// `{"type":"stop","turn"}`: the running turn ends after its current step; a turn still
    /// waiting for its start is answered at once without running; any other is told so.
    pub(super) fn obey_stop(&mut self, message: Incoming, acting: &Acting) {
        let turn = message.body["turn"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if self.finished.as_deref() == Some(turn.as_str()) {
            // The turn ended while the stop was on its way: it is done, as asked.
            return;
        }
        let running = self
            .running
            .clone()
            .filter(|_| self.current.as_deref() == Some(turn.as_str()));
        let queued = self.inbox.turns.iter().position(|m| m.id == turn);
        let target = match (&running, queued) {
            (Some((conversation, started)), _) => Some((conversation.clone(), started.clone())),
            (None, Some(n)) => {
                let started = self.inbox.turns[n].clone();
                let conversation = Conversation::of_text(&started, &self.data)
                    .unwrap_or_else(|_| Conversation::Actor(started.from.clone()));
                Some((conversation, started))
            }
            (None, None) => None,
        };
        if let Some((conversation, started)) = &target
            && !access::may_stop(
                &self.data,
                &message,
                (acting.person.as_deref(), acting.tier),
                conversation,
                started,
            )
        {
            let words = format!("refused: turn {turn} is not yours to stop");
            return self.reply(
                &message,
                json!({"type": "error", "request": "stop", "reason": words}),
            );
        }
        if running.is_some() {
            eprintln!("agent: {} stops the turn {turn}", message.from);
            self.stop_asked = true;
            return;
        }
        if let Some(n) = queued {
            let queued = self.inbox.turns.remove(n);
            self.save_inbox();
            let words = "Stopped before it started, as asked.".to_string();
            self.refuse_turn(&queued, words, Some(Stopped::Stop));
            return;
        }
        let words = if turn.is_empty() {
            "A stop needs the id of the turn to stop: {\"type\":\"stop\",\"turn\":\"<id of the \
             message that started it>\"}."
                .to_string()
        } else {
            format!("There is no turn {turn} running; it may have ended already.")
        };
        self.reply(
            &message,
            json!({"type": "error", "request": "stop", "reason": words}),
        );
    }

    pub(super) fn has_notes(&self, conversation: &Conversation) -> bool {
        self.inbox
            .notes
            .iter()
            .any(|kept| self.conversation_of(kept) == *conversation)
    }

    pub(super) fn conversation_of(&self, kept: &Kept) -> Conversation {
        kept.conversation
            .clone()
            .unwrap_or_else(|| Conversation::of_note(&kept.message, &self.actor))
    }

    /// Takes the messages kept for `conversation` out of the inbox, in order.
    pub(super) fn take_kept(&mut self, conversation: &Conversation) -> Vec<Incoming> {
        let (mine, others): (Vec<Kept>, Vec<Kept>) = std::mem::take(&mut self.inbox.notes)
            .into_iter()
            .partition(|kept| self.conversation_of(kept) == *conversation);
        self.inbox.notes = others;
        if !mine.is_empty() {
            self.save_inbox();
        }
        mine.into_iter().map(|kept| kept.message).collect()
    }

    /// The messages kept for `conversation` as one user entry, taking them from the inbox.
    pub(super) fn take_notes(&mut self, conversation: &Conversation) -> Option<Entry> {
        let lines: Vec<String> = self
            .take_kept(conversation)
            .iter()
            .map(Incoming::to_line)
            .collect();
        if lines.is_empty() {
            return None;
        }
        Some(Entry::user(cut_output(format!(
            "Messages that arrived meanwhile:\n{}",
            lines.join("\n")
        ))))
    }

    /// A reply to `message`, to its sender; for the person it came from (`for`) and, when it
    /// named a room, that room. It continues the trace of what it answers, never a turn's.
    pub(super) fn reply(&mut self, message: &Incoming, mut body: Value) {
        if let Some(person) = &message.person {
            body["for"] = json!(person);
        }
        if let (Some(room), Value::Null) = (message.body["room"].as_str(), &body["room"]) {
            body["room"] = json!(room);
        }
        self.host.send(&Outgoing {
            to: Some(message.from.clone()),
            id: None,
            reply_to: Some(message.id.clone()),
            speaks_for: None,
            trace: message.trace.clone(),
            body,
        });
    }

    pub(super) fn save_inbox(&mut self) {
        if self.candidate {
            return;
        }
        let path = self.file("inbox.json");
        if self.inbox.notes.is_empty()
            && self.inbox.turns.is_empty()
            && self.inbox.sent.is_empty()
            && self.inbox.owners_asked.is_empty()
        {
            if path.exists() {
                self.report(
                    std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display())),
                );
            }
        } else {
            self.report(write_json(&path, &self.inbox));
        }
    }
}

/// The last [`CONVERSATION_ENTRIES`] entries of `history` as a person reads them:
/// `{"role":"user","from","id","person"?,"text"}` for a message that started a turn (`person`
/// in a room's; the asker adds `rewindable`), `{"role":"note",
/// "text"}` for other messages shown to the model,
/// `{"role":"assistant","text","steps"?,"usage"?,"stopped"?}` (on a turn's answer: its
/// waterfall and its cost line, as the answer gave them),
/// `{"role":"tool","name","preview"}` for each call (no arguments, no output), and
/// `{"role":"summary","text"}` where older entries were summarised. Provider items are left out.
fn conversation(history: &History) -> Vec<Value> {
    let start = history.entries.len().saturating_sub(CONVERSATION_ENTRIES);
    history.entries[start..]
        .iter()
        .filter_map(|entry| match entry {
            Entry::User { text } => Some(user_entry(text)),
            Entry::Assistant {
                text, steps, usage, ..
            } if !text.is_empty() => {
                let mut entry = json!({"role": "assistant", "text": text});
                if let Some(steps) = steps {
                    entry["steps"] = steps.clone();
                }
                // A turn's final answer: its cost line (`usage`, and `stopped` if it was).
                if let Some(Value::Object(ending)) = usage {
                    for (key, value) in ending {
                        entry[key.as_str()] = value.clone();
                    }
                }
                Some(entry)
            }
            Entry::ToolCall {
                name, arguments, ..
            } => Some(json!({"role": "tool", "name": name, "preview": preview(name, arguments)})),
            Entry::Summary { text } => Some(json!({"role": "summary", "text": text})),
            Entry::Assistant { .. } | Entry::ToolResult { .. } | Entry::Opaque { .. } => None,
        })
        .collect()
}

/// A user entry: a turn's message (`Message <id> from <sender>[ by <person>]:\n<text>`, as
/// [`Agent::start`] writes it; a room's name their person) or notes.
pub(super) fn user_entry(text: &str) -> Value {
    let parsed = text.strip_prefix("Message ").and_then(|rest| {
        let (head, body) = rest.split_once(":\n")?;
        let (id, from) = head.split_once(" from ")?;
        Some(match from.split_once(" by ") {
            Some((from, person)) => {
                json!({"role": "user", "id": id, "from": from, "person": person, "text": body})
            }
            None => json!({"role": "user", "id": id, "from": from, "text": body}),
        })
    });
    parsed.unwrap_or_else(|| json!({"role": "note", "text": text}))
}
