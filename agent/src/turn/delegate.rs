//! `delegate {role, brief}` (DESIGN §26): the `delegate` calls of one model reply run
//! together, up to `max_subagents` at once (the rest start as others report). Each asks the
//! broker for a sub-agent (`delegate`), which hands it the brief; what the sub-agent tells
//! (progress, tool lines) goes on to the turn's people as `subagent` messages, so they see it
//! nested under the call; its answer is its report, the call's output, and what it cost counts
//! in this turn and its person's day. A reported (or timed out) sub-agent is dismissed: the
//! broker removes it. A stop of the turn dismisses every one at once, which ends their model
//! requests with them.
//!
//! The batch is kept in the saved turn (`delegations`) at each change, so a restart goes on
//! waiting for the same sub-agents (which resume their own turns) instead of asking again.

use std::collections::VecDeque;

use super::*;
use crate::delegation::{self, Role};

/// How long a sub-agent runs when its role names no `max_minutes`.
const DEFAULT_MINUTES: u64 = 30;

/// How long the broker has to make a sub-agent.
const MAKING_PATIENCE: u64 = 120;

/// One `delegate` call of the batch, as the saved turn keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedDelegation {
    pub call_id: String,
    pub role: String,
    pub brief: String,
    /// The `delegate` request's id, as its reply names it; `None` until it is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The brief's id, which the sub-agent's messages reply to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The sub-agent, once the broker said which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// When the request went, in seconds since 1970.
    #[serde(default)]
    pub sent_at: u64,
    /// The call's output, once it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// One delegation on its way: what is saved, and what only this run needs.
struct Delegation {
    saved: SavedDelegation,
    role: Role,
    deadline: Instant,
    began: Instant,
    /// The call's span in the turn's trace.
    span: Option<String>,
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
        let roles = sausage_roles::load(&self.file("roles"));
        let who = turn.who();
        let depth = self.subagent.as_ref().map_or(0, |s| s.depth);
        turn.delegations = calls
            .iter()
            .map(|(call_id, arguments)| {
                let role = string_arg(arguments, "role").and_then(|name| {
                    let role = roles.get(name).map_err(|why| format!("error: {why}"))?;
                    delegation::may_delegate(role, who.tier, depth)?;
                    Ok(role.name.clone())
                });
                let brief = string_arg(arguments, "brief").map(|b| b.trim().to_string());
                let output = match (&role, &brief) {
                    (Err(e), _) | (_, Err(e)) => Some(e.clone()),
                    (_, Ok(brief)) if brief.is_empty() => Some(
                        "error: `brief` is empty: say what the sub-agent is to do, all it needs \
                         to know, and what to report"
                            .into(),
                    ),
                    _ => None,
                };
                SavedDelegation {
                    call_id: call_id.clone(),
                    role: role.unwrap_or_default(),
                    brief: brief.unwrap_or_default(),
                    request: None,
                    message: None,
                    actor: None,
                    sent_at: 0,
                    output,
                }
            })
            .collect();
        self.save(history, turn);
        self.run_delegations(config, history, turn, &roles)
    }

    /// Goes on with the batch a restart cut off (`turn.delegations`): waits for the sub-agents
    /// asked for, starts those that were not yet. `None` when a shutdown came.
    pub(super) fn resume_delegations(
        &mut self,
        config: &Config,
        history: &mut History,
        turn: &mut SavedTurn,
    ) -> Option<HashMap<String, String>> {
        let roles = sausage_roles::load(&self.file("roles"));
        self.run_delegations(config, history, turn, &roles)
    }

    /// The batch's loop: starts what waits (up to `max_subagents` at once), passes on what
    /// sub-agents tell, takes their reports, until every call has its output.
    fn run_delegations(
        &mut self,
        config: &Config,
        history: &mut History,
        turn: &mut SavedTurn,
        roles: &delegation::Roles,
    ) -> Option<HashMap<String, String>> {
        let now = unix_seconds(self.host.now());
        let mut waiting = VecDeque::new();
        let mut running: Vec<Delegation> = Vec::new();
        let open: Vec<SavedDelegation> = (turn.delegations.iter())
            .filter(|d| d.output.is_none())
            .cloned()
            .collect();
        for saved in open {
            let role = match roles.get(&saved.role) {
                Ok(role) => role.clone(),
                Err(why) => {
                    self.set_output(turn, &saved.call_id, format!("error: {why}"));
                    continue;
                }
            };
            match saved.request {
                None => waiting.push_back((saved, role)),
                Some(_) => {
                    // Sent before a restart: the same sub-agent, with what is left of its time.
                    let minutes = role.max_minutes.unwrap_or(DEFAULT_MINUTES);
                    let limit = match saved.actor {
                        Some(_) => minutes * 60,
                        None => MAKING_PATIENCE.max(minutes * 60),
                    };
                    let left = (saved.sent_at + limit).saturating_sub(now);
                    running.push(Delegation {
                        saved,
                        role,
                        deadline: Instant::now() + Duration::from_secs(left),
                        began: Instant::now(),
                        span: None,
                    });
                }
            }
        }
        loop {
            while running.len() < config.max_subagents
                && let Some((saved, role)) = waiting.pop_front()
            {
                let started = self.start_delegation(config, history, turn, saved, role);
                running.push(started);
            }
            if running.is_empty() {
                break;
            }
            if self.stop_asked {
                for delegation in running.drain(..) {
                    self.dismiss(&delegation.saved);
                    let output = "stopped: the person stopped the turn; the sub-agent was \
                                  dismissed before it reported"
                        .to_string();
                    self.finish_delegation(turn, &delegation, &output);
                    self.set_output(turn, &delegation.saved.call_id, output);
                }
                for (saved, _) in waiting.drain(..) {
                    self.set_output(turn, &saved.call_id, NOT_RUN.into());
                }
                break;
            }
            let next = running.iter().map(|d| d.deadline).min().expect("one runs");
            match self.receive(Some(next.saturating_duration_since(Instant::now()))) {
                Event::Message(message) => {
                    self.delegation_message(turn, message, &mut running);
                }
                Event::TimedOut => {
                    let now = Instant::now();
                    for delegation in running.iter_mut().filter(|d| d.deadline <= now) {
                        let minutes = delegation.role.max_minutes.unwrap_or(DEFAULT_MINUTES);
                        let output = match &delegation.saved.actor {
                            Some(actor) => format!(
                                "error: sub-agent {actor} did not report within {minutes} \
                                 minutes (the role's max_minutes); it was dismissed"
                            ),
                            None => "error: the broker did not make the sub-agent in time; \
                                     try again"
                                .into(),
                        };
                        self.dismiss(&delegation.saved);
                        delegation.saved.output = Some(output);
                    }
                }
                Event::Stop => return None,
            }
            let mut at = 0;
            while at < running.len() {
                let Some(output) = running[at].saved.output.clone() else {
                    at += 1;
                    continue;
                };
                let delegation = running.remove(at);
                self.finish_delegation(turn, &delegation, &output);
                self.set_output(turn, &delegation.saved.call_id, output);
            }
            // What the sub-agents answered so far survives a restart.
            for delegation in &running {
                if let Some(kept) =
                    (turn.delegations.iter_mut()).find(|d| d.call_id == delegation.saved.call_id)
                {
                    *kept = delegation.saved.clone();
                }
            }
            self.save(history, turn);
        }
        let outputs = (turn.delegations.drain(..))
            .map(|d| (d.call_id, d.output.unwrap_or_else(|| NOT_RUN.into())))
            .collect();
        self.save(history, turn);
        Some(outputs)
    }

    /// Records a call's output in the saved batch.
    fn set_output(&mut self, turn: &mut SavedTurn, call_id: &str, output: String) {
        if let Some(saved) = turn.delegations.iter_mut().find(|d| d.call_id == call_id) {
            saved.output = Some(output);
        }
    }

    /// Asks the broker for a sub-agent in `role` with the saved call's brief.
    fn start_delegation(
        &mut self,
        config: &Config,
        history: &mut History,
        turn: &mut SavedTurn,
        mut saved: SavedDelegation,
        role: Role,
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
        let preview = shorten(&format!("{}: {}", role.name, saved.brief), PREVIEW_CHARS);
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
            &format!("delegate {} {}", role.name, saved.brief),
            STEP_DESCRIPTION_CHARS,
        ));
        saved.request = Some(published.clone());
        saved.message = Some(message.clone());
        saved.sent_at = unix_seconds(self.host.now());
        if let Some(kept) = turn
            .delegations
            .iter_mut()
            .find(|d| d.call_id == saved.call_id)
        {
            *kept = saved.clone();
        }
        // Saved before sending: a restart waits for this very sub-agent.
        self.save(history, turn);
        self.tell(
            turn,
            json!({"type": "tool", "tool": "delegate", "state": "started", "preview": preview,
                   "call": saved.call_id}),
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
                "brief": saved.brief, "message": message,
            }),
        });
        self.enter(turn);
        Delegation {
            saved,
            role,
            deadline: Instant::now() + Duration::from_secs(MAKING_PATIENCE),
            began: Instant::now(),
            span: Some(span),
        }
    }

    /// One message that came while sub-agents work: the broker's answer to a `delegate`, a
    /// sub-agent's progress (passed on) or its report; anything else is kept as ever.
    fn delegation_message(
        &mut self,
        turn: &mut SavedTurn,
        message: Incoming,
        running: &mut [Delegation],
    ) {
        let reply_to = message.reply_to.clone().unwrap_or_default();
        if message.from == "broker" && reply_to.ends_with(DISMISSAL) {
            if message.kind() == "error" {
                eprintln!(
                    "agent: a sub-agent was not dismissed: {}",
                    message.body["reason"]
                );
            }
            return;
        }
        if message.from == "broker"
            && let Some(delegation) =
                (running.iter_mut()).find(|d| d.saved.request.as_deref() == Some(&reply_to))
        {
            match (message.kind(), message.body["actor"].as_str()) {
                ("delegated", Some(actor)) => {
                    delegation.saved.actor = Some(actor.to_string());
                    let minutes = delegation.role.max_minutes.unwrap_or(DEFAULT_MINUTES);
                    delegation.deadline = delegation.began + Duration::from_secs(minutes * 60);
                    self.tell(
                        turn,
                        json!({"type": "subagent", "actor": actor, "role": delegation.role.name,
                               "call": delegation.saved.call_id, "event": {"type": "started",
                               "brief": shorten(&delegation.saved.brief, PREVIEW_CHARS)}}),
                    );
                }
                _ => {
                    let reason = message.body["reason"]
                        .as_str()
                        .unwrap_or("it gave no reason");
                    delegation.saved.output =
                        Some(format!("error: the broker made no sub-agent: {reason}"));
                }
            }
            return;
        }
        // A sub-agent of this agent answering its brief; after a restart that lost the
        // broker's answer, the brief's id alone says which.
        let ours = format!("{}-s", self.actor);
        let from_subagent = running.iter_mut().find(|d| {
            d.saved.message.as_deref() == Some(&reply_to)
                && match &d.saved.actor {
                    Some(actor) => *actor == message.from,
                    None => message.from.starts_with(&ours),
                }
        });
        let Some(delegation) = from_subagent else {
            return self.keep(message);
        };
        let actor = message.from.clone();
        delegation.saved.actor = Some(actor.clone());
        if message.kind() == "text" && message.body.get("usage").is_some() {
            self.charge_report(turn, &message.body);
            // What it changed, a rewind of this turn puts back.
            let actors: Vec<String> = (message.body["changed"]["actors"].as_array())
                .into_iter()
                .flatten()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect();
            if let Err(e) = self.keep_delegated(turn, &reply_to, actors) {
                eprintln!("agent: what sub-agent {actor} changed cannot be rewound: {e}");
            }
            let output = delegation::report_words(&actor, &delegation.role.name, &message.body);
            self.dismiss(&delegation.saved);
            delegation.saved.output = Some(output);
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
                   "call": delegation.saved.call_id, "event": event}),
        );
    }

    /// Dismisses every sub-agent of the saved batch still without an output: the turn ends
    /// without waiting for them (a restart loop ended it, say).
    pub(super) fn dismiss_left(&mut self, turn: &mut SavedTurn) {
        for saved in std::mem::take(&mut turn.delegations) {
            if saved.output.is_some() {
                continue;
            }
            self.dismiss(&saved);
        }
    }

    /// Asks the broker to remove the sub-agent (when it made one); its answer is dropped.
    fn dismiss(&mut self, saved: &SavedDelegation) {
        let (Some(actor), Some(request)) = (&saved.actor, &saved.request) else {
            return;
        };
        // One dismissal a delegation: its request's own id, marked.
        let own = request.rsplit_once('/').map_or("d", |(_, own)| own);
        let id = format!("{own}{DISMISSAL}");
        let published = format!("{}/{id}", self.actor);
        let body = json!({"type": "dismiss", "actor": actor});
        self.remember_sent(&published, "broker");
        self.send(Outgoing {
            to: Some("broker".into()),
            id: Some(id),
            reply_to: None,
            speaks_for: None,
            trace: None,
            body,
        });
    }

    /// The call's `finished` line and its span's end.
    fn finish_delegation(&mut self, turn: &mut SavedTurn, delegation: &Delegation, output: &str) {
        let ok = !output.starts_with("error") && !output.starts_with("stopped");
        if let (Some(trace), Some(span)) = (&mut turn.trace, &delegation.span) {
            let failed = (!ok).then_some(output);
            trace.finish_tool(span, unix_ms(self.host.now()), failed);
        }
        self.tell(
            turn,
            json!({"type": "tool", "tool": "delegate", "state": "finished", "ok": ok,
                   "seconds": round_seconds(delegation.began.elapsed()),
                   "call": delegation.saved.call_id}),
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

/// What marks the id of a dismissal, whose answer is dropped.
const DISMISSAL: &str = ".dismiss";
