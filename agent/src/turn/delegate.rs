//! `delegate {role, brief}` (DESIGN §26): the `delegate` calls of one model reply run
//! together, up to `max_subagents` at once (the rest start as others report). Each asks the
//! broker for a sub-agent (`delegate`), which hands it the brief; what the sub-agent tells
//! (progress, tool lines, its card) goes on to the turn's people as `subagent` messages, so
//! they see it nested under the call; its answer is its report, the call's output, and what
//! it cost counts in this turn and its person's day. A reported (or stopped) sub-agent is
//! dismissed: the broker removes it. A stop of the turn dismisses every one at once, which
//! ends their model requests with them.

use std::collections::VecDeque;

use super::*;
use crate::delegation::{self, Role};

/// How long a sub-agent runs when its role names no `max_minutes`.
const DEFAULT_MINUTES: u64 = 30;

/// How long the broker has to make a sub-agent.
const MAKING_PATIENCE: Duration = Duration::from_secs(120);

/// One `delegate` call on its way.
struct Delegation {
    call_id: String,
    role: Role,
    brief: String,
    /// The id of the `delegate` request to the broker, as its reply names it.
    request: String,
    /// The brief's id, which the sub-agent's messages reply to.
    message: String,
    /// The sub-agent, once the broker made it.
    actor: Option<String>,
    deadline: Instant,
    began: Instant,
    /// The call's span in the turn's trace.
    span: String,
}

impl<H: Host> Agent<H> {
    /// Runs the `delegate` calls `calls` (tool call id, arguments) of one reply; returns each
    /// one's output by its id, or `None` when a shutdown came.
    pub(super) fn delegate_all(
        &mut self,
        config: &Config,
        history: &mut History,
        turn: &mut SavedTurn,
        calls: &[(String, Value)],
    ) -> Option<HashMap<String, String>> {
        let roles = delegation::Roles::clone(&sausage_roles::load(&self.file("roles")));
        let who = turn.who();
        let depth = self.subagent.as_ref().map_or(0, |s| s.depth);
        let mut outputs = HashMap::new();
        let mut waiting = VecDeque::new();
        for (call_id, arguments) in calls {
            let role = string_arg(arguments, "role").and_then(|name| {
                roles
                    .get(name)
                    .cloned()
                    .map_err(|why| format!("error: {why}"))
            });
            let brief = string_arg(arguments, "brief").map(|b| b.trim().to_string());
            let prepared = match (role, brief) {
                (Err(e), _) | (_, Err(e)) => Err(e),
                (Ok(_), Ok(brief)) if brief.is_empty() => Err("error: `brief` is empty: say what \
                     the sub-agent is to do, all it needs to know, and what to report"
                    .into()),
                (Ok(role), Ok(brief)) => {
                    delegation::may_delegate(&role, who.tier, depth).map(|()| (role, brief))
                }
            };
            match prepared {
                Ok((role, brief)) => waiting.push_back((call_id.clone(), role, brief)),
                Err(refusal) => {
                    outputs.insert(call_id.clone(), refusal);
                }
            }
        }
        let mut running: Vec<Delegation> = Vec::new();
        let mut dismissing: Vec<String> = Vec::new();
        loop {
            while running.len() < config.max_subagents
                && let Some((call_id, role, brief)) = waiting.pop_front()
            {
                let started = self.start_delegation(config, history, turn, call_id, role, brief);
                running.push(started);
            }
            if running.is_empty() {
                break;
            }
            if self.stop_asked {
                for mut delegation in running.drain(..) {
                    self.dismiss(&mut delegation, &mut dismissing);
                    let output = "stopped: the person stopped the turn; the sub-agent was \
                                  dismissed before it reported"
                        .to_string();
                    self.finish_delegation(turn, &delegation, &output);
                    outputs.insert(delegation.call_id, output);
                }
                for (call_id, ..) in waiting.drain(..) {
                    outputs.insert(call_id, NOT_RUN.into());
                }
                break;
            }
            let next = running.iter().map(|d| d.deadline).min().expect("one runs");
            match self.receive(Some(next.saturating_duration_since(Instant::now()))) {
                Event::Message(message) => self.delegation_message(
                    turn,
                    message,
                    &mut running,
                    &mut dismissing,
                    &mut outputs,
                ),
                Event::TimedOut => {
                    let now = Instant::now();
                    for delegation in running.iter_mut().filter(|d| d.deadline <= now) {
                        let minutes = delegation.role.max_minutes.unwrap_or(DEFAULT_MINUTES);
                        let output = match &delegation.actor {
                            Some(actor) => format!(
                                "error: sub-agent {actor} did not report within {minutes} \
                                 minutes (the role's max_minutes); it was dismissed"
                            ),
                            None => "error: the broker did not make the sub-agent in time; \
                                     try again"
                                .into(),
                        };
                        self.dismiss(delegation, &mut dismissing);
                        outputs.insert(delegation.call_id.clone(), output);
                    }
                }
                Event::Stop => return None,
            }
            running.retain(|delegation| {
                let Some(output) = outputs.get(&delegation.call_id) else {
                    return true;
                };
                let output = output.clone();
                self.finish_delegation(turn, delegation, &output);
                false
            });
        }
        Some(outputs)
    }

    /// Asks the broker for a sub-agent in `role` with `brief`.
    fn start_delegation(
        &mut self,
        config: &Config,
        history: &mut History,
        turn: &mut SavedTurn,
        call_id: String,
        role: Role,
        brief: String,
    ) -> Delegation {
        history.sent += 1;
        let id = format!("{}.d{}", turn.conversation.tag(), history.sent);
        let published = format!("{}/{id}", self.actor);
        let message = format!("{published}.brief");
        // What is left of the turn's budget is the most a sub-agent may spend.
        let left = config
            .price
            .map(|_| (self.turn_budget(config) - turn.cost_usd).max(0.0));
        let budget = match (role.budget_usd, left) {
            (Some(own), Some(left)) => Some(own.min(left)),
            (own, left) => own.or(left),
        };
        let preview = shorten(&format!("{}: {brief}", role.name), PREVIEW_CHARS);
        let span = self.span_id();
        let step = Step {
            id: span.clone(),
            start_ms: unix_ms(self.host.now()),
            end_ms: None,
            error: None,
            what: What::Tool {
                tool: "delegate".into(),
                preview: preview.clone(),
                ok: true,
            },
        };
        if let Some(trace) = &mut turn.trace
            && trace.add(step)
        {
            self.trace = trace.line_trace(Some(&span));
        }
        turn.done.push(shorten(
            &format!("delegate {} {brief}", role.name),
            STEP_DESCRIPTION_CHARS,
        ));
        self.save(history, turn);
        self.tell(
            turn,
            json!({"type": "tool", "tool": "delegate", "state": "started", "preview": preview,
                   "call": call_id}),
        );
        self.remember_sent(&published, "broker");
        self.send(Outgoing {
            to: Some("broker".into()),
            id: Some(id),
            reply_to: None,
            speaks_for: self.speaks_for(turn),
            trace: None,
            body: json!({
                "type": "delegate", "role": delegation::role_body(&role, budget),
                "brief": brief, "message": message,
            }),
        });
        self.enter(turn);
        Delegation {
            call_id,
            role,
            brief,
            request: published,
            message,
            actor: None,
            deadline: Instant::now() + MAKING_PATIENCE,
            began: Instant::now(),
            span,
        }
    }

    /// One message that came while sub-agents work: the broker's answer to a `delegate`, a
    /// sub-agent's progress (passed on) or its report; anything else is kept as ever.
    fn delegation_message(
        &mut self,
        turn: &mut SavedTurn,
        message: Incoming,
        running: &mut [Delegation],
        dismissing: &mut Vec<String>,
        outputs: &mut HashMap<String, String>,
    ) {
        let reply_to = message.reply_to.clone().unwrap_or_default();
        if message.from == "broker" && dismissing.contains(&reply_to) {
            dismissing.retain(|d| *d != reply_to);
            if message.kind() == "error" {
                eprintln!(
                    "agent: a sub-agent was not dismissed: {}",
                    message.body["reason"]
                );
            }
            return;
        }
        if message.from == "broker"
            && let Some(delegation) = running.iter_mut().find(|d| d.request == reply_to)
        {
            match (message.kind(), message.body["actor"].as_str()) {
                ("delegated", Some(actor)) => {
                    delegation.actor = Some(actor.to_string());
                    let minutes = delegation.role.max_minutes.unwrap_or(DEFAULT_MINUTES);
                    delegation.deadline = delegation.began + Duration::from_secs(minutes * 60);
                    self.tell(
                        turn,
                        json!({"type": "subagent", "actor": actor, "role": delegation.role.name,
                               "call": delegation.call_id, "event": {"type": "started",
                               "brief": shorten(&delegation.brief, PREVIEW_CHARS)}}),
                    );
                }
                _ => {
                    let reason = message.body["reason"]
                        .as_str()
                        .unwrap_or("it gave no reason");
                    let output = format!("error: the broker made no sub-agent: {reason}");
                    delegation.deadline = Instant::now();
                    outputs.insert(delegation.call_id.clone(), output);
                }
            }
            return;
        }
        let from_subagent = running
            .iter_mut()
            .find(|d| d.actor.as_deref() == Some(message.from.as_str()) && d.message == reply_to);
        let Some(delegation) = from_subagent else {
            return self.keep(message);
        };
        let actor = message.from.clone();
        if message.kind() == "text" && message.body.get("usage").is_some() {
            self.charge_report(turn, &message.body);
            let output = delegation::report_words(&actor, &delegation.role.name, &message.body);
            self.dismiss(delegation, dismissing);
            outputs.insert(delegation.call_id.clone(), output);
            return;
        }
        let mut event = message.body.clone();
        if let Some(event) = event.as_object_mut() {
            for own in ["for", "turn", "room"] {
                event.remove(own);
            }
        }
        self.tell(
            turn,
            json!({"type": "subagent", "actor": actor, "role": delegation.role.name,
                   "call": delegation.call_id, "event": event}),
        );
    }

    /// Asks the broker to remove the sub-agent (when it made one); its answer is dropped.
    fn dismiss(&mut self, delegation: &mut Delegation, dismissing: &mut Vec<String>) {
        let Some(actor) = delegation.actor.take() else {
            return;
        };
        // One dismissal a delegation: its request's id, marked.
        let request = delegation
            .request
            .rsplit_once('/')
            .map_or("d", |(_, own)| own);
        let id = format!("{request}.x");
        let published = format!("{}/{id}", self.actor);
        dismissing.push(published.clone());
        self.remember_sent(&published, "broker");
        self.send(Outgoing {
            to: Some("broker".into()),
            id: Some(id),
            reply_to: None,
            speaks_for: None,
            trace: None,
            body: json!({"type": "dismiss", "actor": actor}),
        });
    }

    /// The call's `finished` line and its span's end.
    fn finish_delegation(&mut self, turn: &mut SavedTurn, delegation: &Delegation, output: &str) {
        let ok = !output.starts_with("error") && !output.starts_with("stopped");
        if let Some(trace) = &mut turn.trace {
            let failed = (!ok).then_some(output);
            trace.finish_tool(&delegation.span, unix_ms(self.host.now()), failed);
        }
        self.tell(
            turn,
            json!({"type": "tool", "tool": "delegate", "state": "finished", "ok": ok,
                   "seconds": round_seconds(delegation.began.elapsed()),
                   "call": delegation.call_id}),
        );
    }

    /// A report's cost counts in this turn and in its payer's day.
    fn charge_report(&mut self, turn: &mut SavedTurn, body: &Value) {
        let usage = &body["usage"];
        let tokens = |field: &str| usage[field].as_u64().unwrap_or(0);
        let used = Usage {
            input_tokens: tokens("input_tokens"),
            output_tokens: tokens("output_tokens"),
            cache_read_tokens: tokens("cache_read_tokens"),
            cache_write_tokens: tokens("cache_write_tokens"),
        };
        turn.usage.add(used);
        let Some(cost) = usage["cost_usd"].as_f64() else {
            turn.unpriced = true;
            return;
        };
        turn.cost_usd += cost;
        let path = self.file("spend.json");
        let mut spend = budget::Spend::load(&path, self.host.now());
        spend.add(&turn.payer(), cost, &used);
        if !self.candidate {
            self.report(spend.save(&path));
        }
    }
}
