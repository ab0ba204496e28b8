//! Actions held for a person's approval, and requests the agent files for a person (DESIGN
//! §25), as the broker asks, decides and carries them out; `crate::approvals` stores them.
//!
//! A request a `"hold"` rule holds is answered `{"type": "held", "approval": ID, ...}` at once
//! and kept whole; once a person approves it, it is answered again as if it had just come
//! (the approval lets that one request past its rule), and the asker gets the real answer,
//! with the same `reply_to`. A denial or an expiry answers it with an `error` that says so.
//! `request_secret` and `request_grant` are kept the same way and answered `secret_set` or
//! `granted`. Everyone who may decide is told: `console` and `web` get an `approval` message.
//! **Invariant:** a decision is written before it is carried out, and carried out once more
//! after a restart when the host died in between (`Approvals::decided`). On a cluster the host
//! that held it carries it out, or one that takes over once it is gone; an approved request
//! passes its rule once, on whichever host answers it (its entry goes as it passes).

use std::sync::Arc;

use serde_json::{Value, json};

use super::Broker;
use super::principal::Principal;
use super::requests::string_field;
use crate::approvals::{Approvals, Held, NewHold};
use crate::message::{ActorId, Envelope, Outgoing, Speaker, Tier};
use crate::secrets::{Acting, NewSecret, Secrets};
use crate::world::{HeldAction, HoldBy};

/// How often held actions are checked for expiry.
const EXPIRY_CHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// How long an approved request, answered again, may take to come back to its rule before
/// its entry is forgotten.
const NEVER_CAME_BACK: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// The longest `why` kept: a sentence or a short paragraph.
const MAX_WHY_CHARS: usize = 1000;

/// Why a decision was not made (nothing changed), as the page answers it.
#[derive(Debug)]
pub enum Undecided {
    /// Nothing waits under that id now: never, decided already, or expired.
    Unknown(String),
    /// The person may not decide it.
    NotTheirs(String),
    /// What came with it is wrong or missing (a requested secret's value).
    Invalid(String),
    /// The host could not read or write what waits.
    Failed(String),
}

impl std::fmt::Display for Undecided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (Undecided::Unknown(why)
        | Undecided::NotTheirs(why)
        | Undecided::Invalid(why)
        | Undecided::Failed(why)) = self;
        f.write_str(why)
    }
}

/// A decision on a held action, as a person makes it.
pub struct Deciding<'a> {
    pub id: &'a str,
    pub by: &'a Speaker,
    pub approve: bool,
    /// A requested secret's value, when approving a `request_secret`.
    pub value: Option<String>,
}

impl Broker {
    /// Holds `request` when a rule holds `action` for whoever asked: stores it, tells the
    /// people who may decide, and answers `held`. `None`: it goes on now (no rule holds it,
    /// or it was approved and is being carried out).
    /// `actions` are what the request does, each with its words, most particular last; the
    /// first a rule holds is the one asked about.
    pub(super) async fn hold_if(
        &self,
        request: &Envelope,
        principal: &Principal,
        actions: &[(HeldAction, String)],
    ) -> Result<Option<Value>, String> {
        self.hold_for(&ActorId::broker(), request, principal, actions)
            .await
    }

    /// [`Broker::hold_if`] for a request that native actor `handler` answers (the scheduler's
    /// `schedule`): once approved, it is delivered to `handler` again as it came.
    pub async fn hold_for(
        &self,
        handler: &ActorId,
        request: &Envelope,
        principal: &Principal,
        actions: &[(HeldAction, String)],
    ) -> Result<Option<Value>, String> {
        let Some(speaker) = principal.person() else {
            return Ok(None);
        };
        let registry = self.registry().await;
        let by_actor = !request.from.is_native() && request.from.as_str() != "agent";
        let held = actions.iter().find_map(|(action, what)| {
            let rule = registry
                .hold_rule(*action, hold_by(speaker.tier))
                .or_else(|| {
                    by_actor
                        .then(|| registry.hold_rule(*action, HoldBy::Actor))
                        .flatten()
                });
            rule.map(|rule| (rule, *action, what.clone()))
        });
        drop(registry);
        let Some((rule, action, what)) = held else {
            return Ok(None);
        };
        if self.passes_approved(request).await? {
            return Ok(None);
        }
        let body = request.body_value();
        let new = NewHold {
            action: action.as_str().to_string(),
            asked_by: speaker.person.to_string(),
            actor: (!request.from.is_native()).then(|| request.from.to_string()),
            approver: rule.approver,
            for_person: None,
            what,
            why: why(&body)?,
            request: json!({"envelope": kept(request), "handler": handler.as_str()}),
        };
        let held = self.store_hold(new).await?;
        let link = self.approvals_link().await;
        let mut answer = json!({
            "type": "held", "approval": held.id, "action": held.action,
            "approver": held.approver, "expires": held.expires,
            "reason": format!(
                "{} waits for an {}'s approval ({}){}; the answer comes when one decides, \
                 within 24 hours",
                held.what, held.approver.as_str(), held.id, where_to(link.as_deref())
            ),
        });
        if let Some(link) = link {
            answer["link"] = json!(link);
        }
        Ok(Some(answer))
    }

    /// The web page's Approvals view, when the web console runs.
    async fn approvals_link(&self) -> Option<String> {
        let path = self.world.web_address_path();
        let address = blocking(move || std::fs::read_to_string(path))
            .await
            .ok()?
            .ok()?;
        let address = address.trim();
        (!address.is_empty()).then(|| format!("http://{address}/#/approvals"))
    }

    /// `request_secret {name, url, header?, why}`: the turn's person (an owner when the
    /// person may not set it) is asked for the value.
    pub(super) async fn request_secret(
        &self,
        request: &Envelope,
        principal: &Principal,
        body: &Value,
    ) -> Result<Value, String> {
        let speaker = asker(principal)?;
        let name = string_field(body, "name")?;
        let url = string_field(body, "url")?;
        let header = match body.get("header") {
            None | Some(Value::Null) => None,
            Some(_) => Some(string_field(body, "header")?),
        };
        crate::secrets::check_name(name).map_err(|e| format!("{e:#}"))?;
        let url = crate::secrets::check_url(url).map_err(|e| format!("{e:#}"))?;
        if let Some(header) = header {
            crate::secrets::check_header(header).map_err(|e| format!("{e:#}"))?;
        }
        let secrets = Secrets::new(&self.world);
        let (person, tier, named) = (speaker.person.to_string(), speaker.tier, name.to_string());
        let check = move || {
            let who = Acting {
                person: &person,
                tier,
            };
            secrets.check(&who, &named, None)
        };
        let theirs = blocking(check).await?.is_ok();
        let header = header.unwrap_or(crate::secrets::DEFAULT_HEADER);
        let new = NewHold {
            what: format!("set secret `{name}` for {url} (header {header})"),
            why: why(body)?,
            request: json!({"envelope": kept(request), "name": name, "url": url, "header": header}),
            ..filed_for(request, speaker, theirs, "secret")
        };
        let held = self.store_hold(new).await?;
        Ok(held_answer(&held, self.approvals_link().await))
    }

    /// `request_grant {secret, actor, why}`: the turn's person grants it when they may (their
    /// own secret to their own actor); otherwise an owner decides.
    pub(super) async fn request_grant(
        &self,
        request: &Envelope,
        principal: &Principal,
        body: &Value,
    ) -> Result<Value, String> {
        let speaker = asker(principal)?;
        let name = string_field(body, "secret")?.to_string();
        let actor = super::requests::actor_field(body)?;
        let registry = self.registry().await;
        if !registry.actors.contains_key(actor.as_str()) {
            return Err(format!("no actor `{actor}`; `list` shows the actors"));
        }
        drop(registry);
        let owner = self.principal_of_actor(&actor).await;
        let owner = owner.person().map(|o| o.person.to_string());
        let secrets = Secrets::new(&self.world);
        let (person, tier) = (speaker.person.to_string(), speaker.tier);
        let listed = {
            let (secrets, name) = (secrets.clone(), name.clone());
            move || {
                secrets
                    .list()
                    .map(|all| all.into_iter().any(|s| s.name == name))
            }
        };
        if !blocking(listed).await?.map_err(|e| format!("{e:#}"))? {
            return Err(format!(
                "no secret `{name}`; ask for it first with request_secret"
            ));
        }
        let check = {
            let (name, person, actor) = (name.clone(), person.clone(), actor.to_string());
            move || {
                let who = Acting {
                    person: &person,
                    tier,
                };
                secrets.check(&who, &name, Some((&actor, owner.as_deref())))
            }
        };
        let theirs = blocking(check).await?.is_ok();
        let new = NewHold {
            what: format!("grant secret `{name}` to actor `{actor}`"),
            why: why(body)?,
            request: json!({"envelope": kept(request), "secret": name, "actor": actor.as_str()}),
            ..filed_for(request, speaker, theirs, "grant")
        };
        let held = self.store_hold(new).await?;
        Ok(held_answer(&held, self.approvals_link().await))
    }

    /// `spend {usd}`: whether a turn that has cost `usd` may go on (a `spend` rule): answered
    /// `{"type":"spend_ok","up_to_usd"}` (up to where it may go without asking again; `null`
    /// for no limit), or held for a person past `hold_above_usd`.
    pub(super) async fn spend(
        &self,
        request: &Envelope,
        principal: &Principal,
        body: &Value,
    ) -> Result<Value, String> {
        let usd = match body.get("usd").and_then(Value::as_f64) {
            Some(usd) if usd.is_finite() && usd >= 0.0 => usd,
            _ => return Err("`usd` must be the turn's cost so far, in dollars (0 or more)".into()),
        };
        let speaker = asker(principal)?;
        let registry = self.registry().await;
        let above = registry
            .hold_above_usd
            .unwrap_or(crate::world::DEFAULT_HOLD_ABOVE_USD);
        let ruled = registry
            .hold_rule(HeldAction::Spend, hold_by(speaker.tier))
            .is_some();
        drop(registry);
        if !ruled {
            return Ok(json!({"type": "spend_ok", "up_to_usd": null}));
        }
        if usd <= above {
            return Ok(json!({"type": "spend_ok", "up_to_usd": above}));
        }
        let what = format!(
            "a turn of {} spending past ${above:.2} (${usd:.2} so far)",
            speaker.person
        );
        match self
            .hold_if(request, principal, &[(HeldAction::Spend, what)])
            .await?
        {
            Some(held) => Ok(held),
            // Approved: this turn spends on without asking again.
            None => Ok(json!({"type": "spend_ok", "up_to_usd": null})),
        }
    }

    /// `approvals`: what waits that the asker's person may see.
    pub(super) async fn list_approvals(&self, principal: &Principal) -> Result<Value, String> {
        let speaker = asker(principal)?;
        let approvals = self.approvals();
        let (person, tier) = (speaker.person.to_string(), speaker.tier);
        let waiting = blocking(move || approvals.waiting_for(&person, tier))
            .await?
            .map_err(|e| format!("{e:#}"))?;
        Ok(json!({"type": "approvals", "approvals": waiting.iter().map(shown).collect::<Vec<_>>()}))
    }

    /// Decides a held action or request for a person, and carries the decision out.
    pub async fn decide(self: &Arc<Self>, deciding: Deciding<'_>) -> Result<Value, Undecided> {
        let approvals = self.approvals();
        let (id, person, tier) = (
            deciding.id.to_string(),
            deciding.by.person.to_string(),
            deciding.by.tier,
        );
        let held = {
            let (approvals, id) = (approvals.clone(), id.clone());
            blocking(move || approvals.get(&id))
                .await
                .map_err(Undecided::Failed)?
                .map_err(|e| Undecided::Unknown(format!("{e:#}")))?
        };
        crate::approvals::may_decide(&held, &person, tier).map_err(Undecided::NotTheirs)?;
        if held.action == "secret" && deciding.approve {
            // The value is checked and stored before the decision is: a bad one decides
            // nothing, and the person tries again.
            let secrets = Secrets::new(&self.world);
            let Some(value) = deciding.value else {
                // Set since it was asked for (`sausage secret set`, at a terminal's hidden
                // prompt): approving says so.
                let name = held.request["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let since = held.at;
                let listed = blocking(move || secrets.list())
                    .await
                    .map_err(Undecided::Failed)?
                    .map_err(|e| Undecided::Failed(format!("{e:#}")))?;
                if !listed.iter().any(|s| s.name == name && s.set_at >= since) {
                    return Err(Undecided::Invalid(format!(
                        "{id} asks for the value of secret `{name}`: give its value (in the web \
                         page's Approvals view), or set it with `sausage secret set {name} --url \
                         {}` and approve {id} again",
                        held.request["url"].as_str().unwrap_or_default()
                    )));
                }
                return self.decide_now(held, &person, tier, true).await;
            };
            let (request, by) = (held.request.clone(), person.clone());
            blocking(move || {
                let text = |field: &str| request[field].as_str().unwrap_or_default().to_owned();
                let (name, url, header) = (text("name"), text("url"), text("header"));
                let new = NewSecret {
                    name: &name,
                    url: &url,
                    header: Some(&header),
                    format: None,
                };
                secrets.set(&new, &value, &by)
            })
            .await
            .map_err(Undecided::Failed)?
            .map_err(|e| Undecided::Invalid(format!("{e:#}")))?;
        }
        self.decide_now(held, &person, tier, deciding.approve).await
    }

    /// Records the decision on `held` and carries it out.
    async fn decide_now(
        self: &Arc<Self>,
        held: Held,
        person: &str,
        tier: Tier,
        approve: bool,
    ) -> Result<Value, Undecided> {
        let approvals = self.approvals();
        let (id, person) = (held.id.clone(), person.to_string());
        // Decided or expired since it was read: it no longer waits.
        let decided = blocking(move || approvals.decide(&id, &person, tier, approve))
            .await
            .map_err(Undecided::Failed)?
            .map_err(|e| Undecided::Unknown(format!("{e:#}")))?;
        let answer = json!({
            "type": if approve { "approved" } else { "denied" },
            "approval": decided.id, "what": decided.what,
        });
        let broker = self.clone();
        tokio::spawn(async move { broker.carry_out_decided().await });
        Ok(answer)
    }

    /// A member's grant of a secret someone else set to an actor of theirs, which a `grant`
    /// rule holds (by default): kept for the rule's approver, answered `held`. `None` when no
    /// rule holds it, or when it is not such a grant: the caller refuses or makes it.
    pub async fn hold_grant(
        &self,
        by: &Speaker,
        secret: &str,
        actor: &ActorId,
        why: &str,
    ) -> Result<Option<Value>, String> {
        let rule = (self.registry().await).hold_rule(HeldAction::Grant, hold_by(by.tier));
        let Some(rule) = rule else {
            return Ok(None);
        };
        let owner = self.principal_of_actor(actor).await;
        if owner.person().map(|o| &o.person) != Some(&by.person) {
            return Ok(None);
        }
        let secrets = Secrets::new(&self.world);
        let setter = {
            let name = secret.to_string();
            blocking(move || {
                secrets
                    .list()
                    .map(|all| all.into_iter().find(|s| s.name == name))
            })
            .await?
            .map_err(|e| format!("{e:#}"))?
            .map(|s| s.set_by)
        };
        let Some(setter) = setter.filter(|s| *s != by.person.as_str()) else {
            return Ok(None);
        };
        let new = NewHold {
            action: "grant".into(),
            asked_by: by.person.to_string(),
            actor: None,
            approver: rule.approver,
            for_person: None,
            what: format!("grant secret `{secret}` (set by {setter}) to actor `{actor}`"),
            why: why.to_string(),
            request: json!({"secret": secret, "actor": actor.as_str()}),
        };
        let held = self.store_hold(new).await?;
        Ok(Some(held_answer(&held, self.approvals_link().await)))
    }

    /// Carries out a decided entry: answers its asker (when one waits) and forgets it.
    async fn carry_out(self: Arc<Self>, held: Held) {
        let Some(decision) = held.decision.clone() else {
            return;
        };
        let request = match held.request.get("envelope").and_then(Value::as_str) {
            Some(line) => match Envelope::from_line(line.as_bytes()) {
                Ok(request) => Some(Arc::new(request)),
                Err(e) => {
                    tracing::error!(
                        "approval {}: its request cannot be read ({e}); dropped",
                        held.id
                    );
                    self.forget_hold(&held.id).await;
                    return;
                }
            },
            None => None,
        };
        let kind = (request.as_ref())
            .and_then(|r| r.body_value()["type"].as_str().map(str::to_owned))
            .unwrap_or_default();
        if !decision.approved {
            let reason = format!("{} denied it ({}): {}", decision.by, held.id, held.what);
            let reply = json!({"type": "error", "request": kind, "reason": reason});
            self.answer_held(request.as_deref(), reply).await;
        } else {
            match (held.action.as_str(), &request) {
                ("secret", _) => {
                    let name = held.request["name"].clone();
                    let reply = json!({"type": "secret_set", "name": name, "by": decision.by});
                    self.answer_held(request.as_deref(), reply).await;
                }
                // What `request_grant` or a member's grant on the page asked.
                ("grant", _) if kind != "grant" => {
                    let reply = self.grant_requested(&held, &decision.by).await;
                    self.answer_held(request.as_deref(), reply).await;
                }
                (_, None) => {
                    tracing::error!("approval {}: nothing to carry out; dropped", held.id);
                }
                (_, Some(request)) => {
                    // Answered as if it had just come, by `serve` (on the host that runs its
                    // actor) or by its native actor; the entry goes as the request passes its
                    // rule (`passes_approved`), wherever that is.
                    let handler = held.request["handler"].as_str().map(ActorId::parse);
                    match handler {
                        Some(Ok(handler)) if handler != ActorId::broker() => {
                            self.router.deliver_routed(handler, request.clone());
                        }
                        _ => {
                            // Fails only once `serve` has ended, when nothing is answered.
                            let _ = self.resumed.send(request.clone());
                        }
                    }
                    return;
                }
            }
        }
        self.forget_hold(&held.id).await;
    }

    /// Grants what a `request_grant` asked, for the person who approved it.
    async fn grant_requested(&self, held: &Held, by: &str) -> Value {
        let secret = held.request["secret"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let actor = held.request["actor"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let secrets = Secrets::new(&self.world);
        let by = by.to_string();
        let granted = blocking({
            let (secret, actor) = (secret.clone(), actor.clone());
            move || {
                let id = ActorId::parse(&actor).map_err(anyhow::Error::msg)?;
                secrets.grant(&secret, &id, &by)
            }
        })
        .await
        .and_then(|done| done.map_err(|e| format!("{e:#}")));
        match granted {
            Ok(_) => json!({"type": "granted", "secret": secret, "actor": actor}),
            Err(reason) => json!({"type": "error", "request": "request_grant", "reason": reason}),
        }
    }

    /// Whether `request` is one a person approved, being carried out now: its entry goes as
    /// it passes, so it passes once.
    async fn passes_approved(&self, request: &Envelope) -> Result<bool, String> {
        let approvals = self.approvals();
        let (from, id) = (request.from.clone(), request.id.clone());
        blocking(move || {
            approvals.pass(|held| {
                let kept = held.request["envelope"].as_str();
                kept.and_then(|line| Envelope::from_line(line.as_bytes()).ok())
                    .is_some_and(|kept| kept.from == from && kept.id == id)
            })
        })
        .await?
        .map_err(|e| format!("{e:#}"))
    }

    /// What waits for approval: on a cluster, the copy the hosts share.
    pub fn approvals(&self) -> Approvals {
        match &self.cluster {
            Some(cluster) => Approvals::shared(
                &self.world,
                cluster.shared.approvals(),
                cluster.placement.host(),
            ),
            None => Approvals::new(&self.world),
        }
    }

    async fn store_hold(&self, new: NewHold) -> Result<Held, String> {
        let approvals = self.approvals();
        let held = blocking(move || approvals.hold(new))
            .await?
            .map_err(|e| format!("{e:#}"))?;
        // Everyone who may decide is told, at the console and on the web page.
        let mut told = shown(&held);
        told["type"] = json!("approval");
        for to in ["console", "web"] {
            let to = ActorId::parse(to).expect("a native id");
            self.send(&ActorId::broker(), Outgoing::new(&to, &told))
                .await;
        }
        Ok(held)
    }

    async fn forget_hold(&self, id: &str) {
        self.carrying.lock().expect("carrying lock").remove(id);
        let (approvals, id) = (self.approvals(), id.to_string());
        if let Ok(Err(e)) = blocking(move || approvals.carried_out(&id)).await {
            tracing::warn!("{e:#}");
        }
    }

    /// Answers the request a held entry kept (when one waits), as the broker answers any.
    async fn answer_held(&self, request: Option<&Envelope>, reply: Value) {
        let Some(request) = request else {
            return;
        };
        let out = Outgoing::new(&request.from, &reply).replying_to(Some(&request.id));
        self.send(&ActorId::broker(), out).await;
    }

    /// At start, carries out what this host decided before its last run ended; then, every
    /// [`EXPIRY_CHECK`], answers what nobody decided within 24 hours, carries out what a
    /// cluster's host that is gone decided, and forgets an approved request that never came
    /// back to its rule.
    pub(super) async fn keep_approvals(self: Arc<Self>) {
        let approvals = self.approvals();
        self.carry_out_decided().await;
        // Said once, not every minute, while the file stays unreadable.
        let mut warned = false;
        loop {
            let now = crate::approvals::now();
            let approvals = approvals.clone();
            let expired = {
                let approvals = approvals.clone();
                blocking(move || approvals.expire(now)).await
            };
            let expired = match expired {
                Ok(Ok(expired)) => {
                    warned = false;
                    expired
                }
                Ok(Err(e)) if !warned => {
                    tracing::warn!("nothing waiting for approval expires for now: {e:#}");
                    warned = true;
                    Vec::new()
                }
                _ => Vec::new(),
            };
            for held in expired {
                let Some(Ok(request)) = held.request["envelope"]
                    .as_str()
                    .map(|line| Envelope::from_line(line.as_bytes()))
                else {
                    continue;
                };
                let kind = request.body_value()["type"].clone();
                let reason = format!(
                    "nobody decided {} within 24 hours ({}); ask again if it is still needed",
                    held.what, held.id
                );
                let reply = json!({"type": "error", "request": kind, "reason": reason});
                self.answer_held(Some(&request), reply).await;
            }
            self.carry_out_decided().await;
            self.forget_unreturned(now).await;
            tokio::time::sleep(EXPIRY_CHECK).await;
        }
    }

    /// Carries out, once each, the decisions this host is to carry out: what it held (or
    /// what was held before the world was a cluster), and on a cluster what a host that is
    /// gone held, taken over. Called at start, after each decision here and, on a cluster,
    /// whenever another host changed what waits.
    pub async fn carry_out_decided(self: &Arc<Self>) {
        let approvals = self.approvals();
        let decided = match blocking(move || approvals.decided()).await {
            Ok(Ok(decided)) => decided,
            Ok(Err(e)) => return tracing::warn!("decisions are not carried out for now: {e:#}"),
            Err(e) => return tracing::error!("{e}"),
        };
        let here = self
            .cluster
            .as_ref()
            .map(|c| c.placement.host().to_string());
        let alive: Vec<String> = (self.cluster.iter())
            .flat_map(|cluster| cluster.placement.hosts())
            .filter(|host| host.alive)
            .map(|host| host.id)
            .collect();
        {
            let mut carrying = self.carrying.lock().expect("carrying lock");
            carrying.retain(|id| decided.iter().any(|held| held.id == *id));
        }
        for held in decided {
            let Some(decision) = &held.decision else {
                continue;
            };
            let held = match (&decision.host, &here) {
                (None, _) => held,
                (Some(carrier), Some(here)) if carrier == here => held,
                // Taken over only once this host knows the others (it counts itself alive).
                (Some(carrier), Some(here)) if alive.contains(here) && !alive.contains(carrier) => {
                    let approvals = self.approvals();
                    let (id, from, to) = (held.id.clone(), carrier.clone(), here.clone());
                    let taken = blocking(move || approvals.take_over(&id, Some(&from), &to));
                    let Ok(Ok(Some(held))) = taken.await else {
                        continue;
                    };
                    tracing::info!("approval {}: carried out here; {carrier} is gone", held.id);
                    held
                }
                _ => continue,
            };
            if self
                .carrying
                .lock()
                .expect("carrying lock")
                .insert(held.id.clone())
            {
                tokio::spawn(self.clone().carry_out(held));
            }
        }
    }

    /// Forgets each approved request this host answered again over [`NEVER_CAME_BACK`] ago
    /// that did not pass its rule again (refused for another reason first, or lost with the
    /// host it went to).
    async fn forget_unreturned(&self, now: u64) {
        let approvals = self.approvals();
        let Ok(Ok(decided)) = blocking(move || approvals.decided()).await else {
            return;
        };
        let carrying = self.carrying.lock().expect("carrying lock").clone();
        for held in decided {
            let at = held.decision.as_ref().map_or(now, |d| d.at);
            if carrying.contains(&held.id) && at + NEVER_CAME_BACK.as_secs() < now {
                tracing::warn!(
                    "approval {}: its request did not come back to its rule within {} minutes \
                     of being approved; forgotten",
                    held.id,
                    NEVER_CAME_BACK.as_secs() / 60
                );
                self.forget_hold(&held.id).await;
            }
        }
    }
}

/// A request the agent files for `speaker`: theirs to answer when `theirs` (they may make the
/// change themselves), else an owner's. Its `what`, `why` and `request` are the caller's.
fn filed_for(request: &Envelope, speaker: &Speaker, theirs: bool, action: &str) -> NewHold {
    let person = speaker.person.to_string();
    NewHold {
        action: action.into(),
        asked_by: person.clone(),
        actor: Some(request.from.to_string()),
        approver: if theirs { speaker.tier } else { Tier::Owner },
        for_person: theirs.then_some(person),
        what: String::new(),
        why: String::new(),
        request: Value::Null,
    }
}

/// The request as kept, to answer (or carry out) once decided: its line.
fn kept(request: &Envelope) -> String {
    String::from_utf8_lossy(&request.to_line())
        .trim_end()
        .to_string()
}

fn hold_by(tier: Tier) -> HoldBy {
    match tier {
        Tier::Owner => HoldBy::Owner,
        Tier::Member => HoldBy::Member,
        Tier::Guest => HoldBy::Guest,
    }
}

fn asker(principal: &Principal) -> Result<&Speaker, String> {
    principal
        .person()
        .ok_or_else(|| "only a person (or an actor, for its owner) may ask for this".to_string())
}

/// The request's `why`, checked.
fn why(body: &Value) -> Result<String, String> {
    match body.get("why") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(why)) if why.chars().count() <= MAX_WHY_CHARS => Ok(why.clone()),
        Some(Value::String(_)) => Err(format!(
            "`why` is longer than {MAX_WHY_CHARS} characters; say it in a few sentences"
        )),
        Some(_) => Err("`why` must be a string: why this is needed, in words".into()),
    }
}

/// The answer to a request filed for a person.
fn held_answer(held: &Held, link: Option<String>) -> Value {
    let whom = match &held.for_person {
        Some(person) => person.clone(),
        None => format!("an {}", held.approver.as_str()),
    };
    let mut answer = json!({
        "type": "held", "approval": held.id, "action": held.action, "for": held.for_person,
        "approver": held.approver, "expires": held.expires,
        "reason": format!(
            "{} waits for {whom} to answer ({}){}; the answer comes when they do, within 24 \
             hours",
            held.what, held.id, where_to(link.as_deref())
        ),
    });
    if let Some(link) = link {
        answer["link"] = json!(link);
    }
    answer
}

/// Where a person decides, in words: the page's link when the web console runs.
fn where_to(link: Option<&str>) -> String {
    match link {
        Some(link) => format!(": decide at {link} or at the console (/approvals)"),
        None => ": decide at the console (/approvals) or on the web page".into(),
    }
}

/// What a person sees of a held entry: everything but the request kept to carry it out.
pub fn shown(held: &Held) -> Value {
    json!({
        "id": held.id, "action": held.action, "asked_by": held.asked_by, "actor": held.actor,
        "approver": held.approver, "for": held.for_person, "what": held.what, "why": held.why,
        "at": held.at, "expires": held.expires,
    })
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("host bug: a blocking task failed: {e}"))
}
