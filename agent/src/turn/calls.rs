//! The tools the turn runs itself, because they need its mailbox or its state: `send_message`
//! (with the member's ownership check, `"as"` for the turn's person, and replies taken only
//! from the actor asked), `wait_for_messages`, `ask`, `plan`, `note`, `remember`
//! and `forget`; and [`Agent::call`], which lets `access` refuse a call before any tool runs.
//! **Invariant:** a refused call has sent nothing and written nothing.

use super::*;

/// The actors that act for a person (DESIGN §18): what the agent sends them for a turn's
/// person carries `"as"`, so the host checks it against that person's tier too, and a schedule
/// made in a person's conversation is theirs (DESIGN §15).
const SPEAK_FOR_PERSON: &[&str] = &["broker", "cargo", "scheduler"];

/// How long `request_secret` and `request_grant` wait for the broker's first answer (`held`,
/// or a refusal).
const HELD_FIRST_WAIT: u64 = 60;

/// The longest a held request waits for its decision: the broker expires it after 24 hours.
const HELD_WAIT: u64 = 24 * 60 * 60;

impl<H: Host> Agent<H> {
    /// Runs one tool call; `None` when a shutdown came while it waited.
    pub(super) fn call(
        &mut self,
        history: &mut History,
        turn: &mut SavedTurn,
        id: &str,
        name: &str,
        arguments: &Value,
    ) -> Option<String> {
        if !arguments.is_object() {
            return Some(format!(
                "error: the arguments must be a JSON object, not {arguments}"
            ));
        }
        let who = turn.who();
        if let Some(subagent) = &self.subagent
            && !subagent.offers(name)
        {
            return Some(format!(
                "error: `{name}` is not a tool of the {} role; use the tools you were given",
                subagent.role.role
            ));
        }
        if name.starts_with(mcp::PREFIX) {
            return self.call_mcp(&who, name, arguments);
        }
        if let Err(refusal) = who.file_tool(&self.data, name, arguments) {
            return Some(refusal);
        }
        // The first change of a path in this turn keeps it for a rewind (DESIGN §21).
        let changed = match name {
            "write_file" | "edit_file" | "remove_path" => arguments["path"].as_str(),
            "copy_dir" => arguments["to"].as_str(),
            _ => None,
        };
        if let Some(path) = changed.filter(|p| p.starts_with('/'))
            && let Err(refusal) = self.keep_path(turn, std::path::Path::new(path))
        {
            return Some(refusal);
        }
        match name {
            "send_message" => self.send_message(history, turn, id, arguments),
            "wait_for_messages" => self.wait_for_messages(&turn.conversation, arguments),
            "ask" => self.ask_person(history, turn, id, arguments),
            "request_secret" | "request_grant" => {
                let mut body = arguments.clone();
                if !body.is_object() {
                    return Some(format!("error: {name} takes an object of arguments"));
                }
                body["type"] = json!(name);
                let request =
                    json!({"to": "broker", "body": body, "wait_seconds": HELD_FIRST_WAIT});
                self.send_message(history, turn, id, &request)
            }
            "plan" => Some(self.plan(turn, arguments)),
            "note" => Some(who.may_note().map_or_else(|e| e, |()| self.note(arguments))),
            "remember" | "forget" => Some(self.memory_tool(turn, name, arguments)),
            "goal_status" => Some(self.goal_status(turn, arguments)),
            _ => Some(tools::run_file_tool(name, arguments).unwrap_or_else(|| {
                let names: Vec<String> = tools::specs().into_iter().map(|s| s.name).collect();
                format!(
                    "error: there is no tool `{name}`; the tools are {}",
                    names.join(", ")
                )
            })),
        }
    }

    /// A tool of an MCP server, if the turn's person's tier may use it; refused before
    /// anything is sent otherwise. `None` when a shutdown came while it ran.
    fn call_mcp(&mut self, who: &Who, name: &str, arguments: &Value) -> Option<String> {
        let (server, tool) = match who.mcp_tool(&self.mcp_turn.0, name) {
            Ok((server, tool)) => (server.clone(), tool.to_string()),
            Err(refusal) => return Some(refusal),
        };
        let arrived = &mut self.arrived;
        let mut client = mcp::Client {
            host: &mut self.host,
            sessions: &mut self.mcp,
            meanwhile: &mut |messages| {
                arrived.add(messages);
                Heard::GoOn
            },
        };
        match client.call_tool(&server, &tool, arguments) {
            Ok(output) => Some(output),
            Err(mcp::Failed::Said(why)) => Some(format!("error: {why}")),
            Err(mcp::Failed::Shutdown) => None,
        }
    }

    /// `plan`: the whole to-do card; the person gets it as `plan` whenever it changes.
    pub(super) fn plan(&mut self, turn: &mut SavedTurn, arguments: &Value) -> String {
        let card = match card::plan(arguments) {
            Ok(card) => card,
            Err(error) => return error,
        };
        let words = card::plan_words(&card);
        if card != turn.plan {
            turn.plan = card.clone();
            self.tell(turn, json!({"type": "plan", "items": card}));
        }
        words
    }

    /// `note`: appended to `/data/notes.md`, which every request shows the model.
    pub(super) fn note(&mut self, arguments: &Value) -> String {
        card::note(&self.file("notes.md"), arguments)
    }

    /// `remember` and `forget`: the memory of the person the turn acts for (in a room, the
    /// one who spoke).
    pub(super) fn memory_tool(
        &mut self,
        turn: &SavedTurn,
        name: &str,
        arguments: &Value,
    ) -> String {
        let who = turn.who();
        let (Some(person), false) = (
            who.person,
            matches!(who.conversation, Conversation::Actor(_)),
        ) else {
            return "error: this conversation is an actor's, not a person's, so there is no one's \
                    memory to change here; the person changes it in their own conversation"
                .into();
        };
        match (name, &arguments["text"]) {
            ("remember", Value::String(text)) => conversations::remember(&self.data, &person, text),
            ("remember", _) => "error: `text` must be the fact or preference to remember".into(),
            (_, Value::String(text)) => conversations::forget(&self.data, &person, Some(text)),
            (_, Value::Null) => conversations::forget(&self.data, &person, None),
            (_, other) => format!(
                "error: `text` is {other}; give the text of the facts to forget, or leave it out to forget everything"
            ),
        }
    }

    /// `ask`: a `question` to the turn's sender; the turn waits for the answer, durably, up to
    /// [`QUESTION_WAIT`].
    pub(super) fn ask_person(
        &mut self,
        history: &mut History,
        turn: &mut SavedTurn,
        call_id: &str,
        arguments: &Value,
    ) -> Option<String> {
        let question = match arguments["question"].as_str().map(str::trim) {
            Some(q) if !q.is_empty() => q.to_string(),
            _ => return Some("error: `question` must be the question, in words".into()),
        };
        let choices = match &arguments["choices"] {
            Value::Null => None,
            Value::Array(items)
                if (1..=MAX_CHOICES).contains(&items.len())
                    && items
                        .iter()
                        .all(|c| c.as_str().is_some_and(|c| !c.trim().is_empty())) =>
            {
                Some(items.clone())
            }
            other => {
                return Some(format!(
                    "error: `choices` is {other}; give 1 to {MAX_CHOICES} non-empty strings, or \
                     leave it out for a free answer"
                ));
            }
        };
        if turn.message.from.is_empty() {
            return Some("error: this turn has no sender to ask".into());
        }
        history.sent += 1;
        let id = format!("{}.q{}", turn.conversation.tag(), history.sent);
        let published = format!("{}/{id}", self.actor);
        let seconds = QUESTION_WAIT.as_secs();
        turn.waiting = Some(Waiting {
            call_id: call_id.to_string(),
            reply_to: published.clone(),
            seconds,
            question: true,
            until: Some(unix_seconds(self.host.now()) + seconds),
            to: None,
        });
        // Saved before asking: a restart goes on waiting for this very question.
        self.save(history, turn);
        let mut body = json!({"type": "question", "text": question});
        if let Some(choices) = choices {
            body["choices"] = Value::Array(choices);
        }
        // In a room every member sees the question, under the same id, and any of them answers.
        self.tell_with_id(turn, body, Some(id));
        let asked = turn.conversation.clone();
        let awaited = self.await_reply(&published, seconds, Expected::PeopleOf(&asked));
        let output = answer_words(awaited, &published)?;
        turn.waiting = None;
        Some(output)
    }

    pub(super) fn send_message(
        &mut self,
        history: &mut History,
        turn: &mut SavedTurn,
        call_id: &str,
        arguments: &Value,
    ) -> Option<String> {
        let to = match string_arg(arguments, "to") {
            Ok(to) if valid_id(to) => to,
            Ok(to) => {
                return Some(format!(
                    "error: `{to}` is not an actor id (a-z, 0-9, -, _; 1 to 64 characters)"
                ));
            }
            Err(e) => return Some(e),
        };
        let mut body = arguments["body"].clone();
        if !body["type"].is_string() {
            return Some("error: `body` must be a JSON object with a string \"type\"".into());
        }
        let who = turn.who();
        match who.send(&self.data, to, &body) {
            access::Send::Allow => {}
            access::Send::Rewritten(rewritten) => body = rewritten,
            access::Send::Refuse(refusal) => return Some(refusal),
            access::Send::IfOwned(actor) => {
                let list = json!({"to": "broker", "body": {"type": "list"}, "wait_seconds": OWNER_CHECK_SECONDS});
                let listed = self.send_message(history, turn, call_id, &list)?;
                // Only the broker's own answer counts: any actor may reply to any id.
                let reply: Value = serde_json::from_str::<Incoming>(&listed)
                    .ok()
                    .filter(|m| m.from == "broker")
                    .map(|m| m.body)
                    .unwrap_or_default();
                if reply["type"] != "actors" {
                    return Some(format!(
                        "refused: I could not check who owns {actor} (the broker's list answered: \
                         {}); nothing was sent. Try again.",
                        shorten(&listed, STEP_DESCRIPTION_CHARS)
                    ));
                }
                if let Err(refusal) = who.owns(&actor, &reply) {
                    return Some(refusal);
                }
            }
        }
        // A change of the world is kept first, so the turn can be rewound (DESIGN §21).
        if let Err(refusal) = self.keep_before_send(history, turn, to, &body) {
            if refusal == "stopped" {
                return None;
            }
            return Some(refusal);
        }
        let seconds = arguments["wait_seconds"]
            .as_u64()
            .unwrap_or(0)
            .min(MAX_WAIT_SECONDS);
        history.sent += 1;
        let id = format!("{}.t{}", turn.conversation.tag(), history.sent);
        let published = format!("{}/{id}", self.actor);
        if seconds > 0 {
            turn.waiting = Some(Waiting {
                call_id: call_id.to_string(),
                reply_to: published.clone(),
                seconds,
                question: false,
                until: None,
                to: Some(to.to_string()),
            });
        }
        // Saved before sending: a restart must neither reuse the id nor forget the wait.
        self.save(history, turn);
        if let ("broker", Some(kind @ ("subscribe" | "unsubscribe")), Some(publisher)) =
            (to, body["type"].as_str(), body["actor"].as_str())
        {
            let asking = (kind == "subscribe").then(|| turn.conversation.clone());
            let noted = self.subscriptions.set(&self.data, publisher, asking);
            self.report(noted);
        }
        // What the agent asks the broker, cargo or the scheduler for a person is that person's
        // request; no message to any other actor speaks for anyone.
        let speaks_for = self
            .speaks_for(turn)
            .filter(|_| SPEAK_FOR_PERSON.contains(&to));
        self.remember_sent(&published, to);
        self.send(Outgoing {
            to: Some(to.to_string()),
            id: Some(id),
            reply_to: None,
            speaks_for,
            trace: None,
            body,
        });
        if seconds == 0 {
            return Some(format!("sent as {published}"));
        }
        let output = match self.await_reply(&published, seconds, Expected::Actor(to)) {
            Awaited::Reply(reply) if to == "broker" && reply.kind() == "held" => {
                self.await_decision(history, turn, call_id, &published, &reply)?
            }
            Awaited::Reply(reply) => reply.to_line(),
            Awaited::TimedOut => format!(
                "sent as {published}; no reply came within {seconds} s (it may still come: use \
                 wait_for_messages)"
            ),
            Awaited::Stopped => {
                format!("sent as {published}; the person stopped the turn before the reply came")
            }
            Awaited::Stop => return None,
        };
        turn.waiting = None;
        Some(output)
    }

    /// The broker held the request `published` for a person's decision (`held`): the turn
    /// waits for the decision, saved so that a restart goes on waiting, until it expires.
    fn await_decision(
        &mut self,
        history: &mut History,
        turn: &mut SavedTurn,
        call_id: &str,
        published: &str,
        held: &Incoming,
    ) -> Option<String> {
        let now = unix_seconds(self.host.now());
        let until = held.body["expires"].as_u64().unwrap_or(now + HELD_WAIT);
        turn.waiting = Some(Waiting {
            call_id: call_id.to_string(),
            reply_to: published.to_string(),
            seconds: HELD_WAIT,
            question: false,
            until: Some(until),
            to: Some("broker".into()),
        });
        self.save(history, turn);
        let reason = held.body["reason"].as_str().unwrap_or_default().to_string();
        // The person learns what waits and where to decide, wherever they follow the turn.
        self.tell(
            turn,
            json!({"type": "progress", "text": format!("\n({reason})\n")}),
        );
        let left = until.saturating_sub(now);
        let output = match self.await_reply(published, left, Expected::Actor("broker")) {
            Awaited::Reply(reply) => format!("{reason}. The decision came: {}", reply.to_line()),
            Awaited::TimedOut => format!("{reason}. Nobody decided in time."),
            Awaited::Stopped => format!("{reason}. The person stopped the turn before a decision."),
            Awaited::Stop => return None,
        };
        turn.waiting = None;
        Some(output)
    }

    /// Records that the message `published` went to `to`, so that only its reply is taken.
    pub(super) fn remember_sent(&mut self, published: &str, to: &str) {
        let sent = &mut self.inbox.sent;
        if sent.len() >= MAX_REMEMBERED_SENDS {
            sent.remove(0);
        }
        sent.push((published.to_string(), to.to_string()));
        self.save_inbox();
    }

    /// Waits for the message whose `reply_to` is `reply_to` from whom `expected` names (the
    /// actor asked, or for a question one of its conversation's people); the others are kept
    /// (or refused, see `keep`). A `stop` for the turn ends the wait.
    pub(super) fn await_reply(
        &mut self,
        reply_to: &str,
        seconds: u64,
        expected: Expected,
    ) -> Awaited {
        if let Expected::PeopleOf(conversation) = expected {
            self.asking = Some((reply_to.to_string(), conversation.clone()));
        }
        let awaited = self.await_from(reply_to, seconds, expected);
        self.asking = None;
        awaited
    }

    fn await_from(&mut self, reply_to: &str, seconds: u64, expected: Expected) -> Awaited {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            if self.stop_asked {
                return Awaited::Stopped;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.receive(Some(left)) {
                Event::Message(m)
                    if m.reply_to.as_deref() == Some(reply_to)
                        && match expected {
                            Expected::Actor(to) => access::is_reply_of(to, &m),
                            Expected::PeopleOf(c) => access::may_answer(&self.data, c, &m),
                            Expected::Anyone => true,
                        } =>
                {
                    return Awaited::Reply(m);
                }
                Event::Message(m) => self.keep(m),
                Event::TimedOut => return Awaited::TimedOut,
                Event::Stop => return Awaited::Stop,
            }
        }
    }

    /// `wait_for_messages`: the messages kept for this conversation (never another's).
    pub(super) fn wait_for_messages(
        &mut self,
        conversation: &Conversation,
        arguments: &Value,
    ) -> Option<String> {
        let seconds = arguments["seconds"]
            .as_u64()
            .unwrap_or(DEFAULT_WAIT_SECONDS)
            .min(MAX_WAIT_SECONDS);
        if !self.has_notes(conversation) {
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let mut timeout = deadline.saturating_duration_since(Instant::now());
            // The first message ends the wait; whatever arrived with it is taken too.
            while !self.stop_asked {
                match self.receive(Some(timeout)) {
                    Event::Message(m) => self.keep(m),
                    Event::TimedOut => break,
                    Event::Stop => return None,
                }
                if self.has_notes(conversation) {
                    timeout = Duration::ZERO;
                } else {
                    timeout = deadline.saturating_duration_since(Instant::now());
                    if timeout.is_zero() {
                        break;
                    }
                }
            }
        }
        let notes = self.take_kept(conversation);
        let mut output: Vec<String> = notes.iter().map(Incoming::to_line).collect();
        if output.is_empty() {
            output.push(format!("no message came within {seconds} s"));
        }
        // Only this conversation's own waiting texts are counted: others' are none of its business.
        let waiting = self
            .inbox
            .turns
            .iter()
            .filter(|m| Conversation::of_text(m, &self.data).as_ref() == Ok(conversation))
            .count();
        if waiting > 0 {
            output.push(format!(
                "({waiting} text message(s) of this conversation wait for their own turn after \
                 this one.)"
            ));
        }
        self.save_inbox();
        Some(output.join("\n"))
    }
}

/// What a tool call does, in at most [`PREVIEW_CHARS`] characters: a path, a recipient and a
/// body type; never a file's content.
pub(super) fn preview(name: &str, arguments: &Value) -> String {
    let text = |key: &str| arguments[key].as_str().unwrap_or("?");
    let words = match name {
        "send_message" => {
            let kind = arguments["body"]["type"].as_str().unwrap_or("?");
            match arguments["wait_seconds"].as_u64() {
                Some(s) if s > 0 => format!("{} {kind} (waits up to {s} s)", text("to")),
                _ => format!("{} {kind}", text("to")),
            }
        }
        "wait_for_messages" => format!(
            "up to {} s",
            arguments["seconds"]
                .as_u64()
                .unwrap_or(DEFAULT_WAIT_SECONDS)
        ),
        "copy_dir" => format!("{} → {}", text("from"), text("to")),
        "search" | "find_files" => format!("{} in {}", text("pattern"), text("path")),
        "plan" => {
            let items = arguments["items"].as_array();
            let done = items
                .into_iter()
                .flatten()
                .filter(|i| i["done"] == true)
                .count();
            format!("{} items, {done} done", items.map_or(0, Vec::len))
        }
        "note" => "/data/notes.md".into(),
        "ask" => text("question").to_string(),
        "goal_status" => text("status").to_string(),
        "write_file" => format!(
            "{} ({} bytes)",
            text("path"),
            arguments["content"].as_str().map_or(0, str::len)
        ),
        _ => match arguments["path"].as_str() {
            Some(path) => path.to_string(),
            None => String::new(),
        },
    };
    match words.char_indices().nth(PREVIEW_CHARS - 1) {
        Some((at, _)) => format!("{}…", &words[..at]),
        None => words,
    }
}

/// What a question's wait came to, as the `ask` tool's output; `None` on a shutdown.
pub(super) fn answer_words(awaited: Awaited, question: &str) -> Option<String> {
    Some(match awaited {
        Awaited::Reply(reply) if reply.kind() == "answer" => format!(
            "{} answered: {}",
            reply.person.as_ref().unwrap_or(&reply.from),
            reply.body["text"].as_str().unwrap_or_default()
        ),
        Awaited::Reply(reply) => format!("a reply to the question came: {}", reply.to_line()),
        Awaited::TimedOut => format!(
            "no answer to {question} came within {} hours; decide without it (say what you              assumed) or ask again later",
            QUESTION_WAIT.as_secs() / 3600
        ),
        Awaited::Stopped => "the person stopped the turn before answering".into(),
        Awaited::Stop => return None,
    })
}
