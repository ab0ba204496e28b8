//! The requests the broker answers (DESIGN §3): parsing, checks, and one function per request.
//!
//! Every request gets exactly one reply to its sender. A failure is an `error` reply whose
//! `reason` says what is wrong and what to do; it never changes anything on disk.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use std::path::PathBuf;

use super::counters::Counters;
use super::limits::{self, Growth};
use super::principal::Principal;
use super::supervisor::{CRASH_LOOP_CRASHES, CRASH_LOOP_WINDOW, CrashLoop, Install, Upgraded};
use super::{Broker, candidate, shadow};
use crate::message::{ActorId, Envelope, Outgoing, Speaker, Tier};
use crate::replace::Replacement;
use crate::runtime::{DEFAULT_MEMORY_MB, Program};
use crate::traces::{self, Span};
use crate::world::routes::Route;
use crate::world::{ActorEntry, HeldAction, read_manifest};

/// A version that passed its tests, ready to store and run.
pub(super) struct Candidate {
    pub(super) program: Program,
    pub(super) report: Value,
    pub(super) wasm_file: PathBuf,
    pub(super) source: Option<PathBuf>,
    pub(super) meta: Value,
}

impl Candidate {
    /// The memory limit it will run with: its source's `actor.json` is installed with it.
    fn memory_mb(&self) -> u32 {
        self.source.as_deref().map_or(DEFAULT_MEMORY_MB, |source| {
            limits::memory_mb(&read_manifest(source))
        })
    }

    /// The HTTP routes its `actor.json` asks for (DESIGN §24), or what is wrong with them.
    fn routes(&self) -> Answer<Vec<(String, Route)>> {
        match self.source.as_deref() {
            Some(source) => read_manifest(source).http,
            None => Ok(Vec::new()),
        }
    }
}

/// The requests that operate on one actor: they run on that actor's operation queue, one
/// after another, in the order they arrived.
const OPERATIONS: [&str; 12] = [
    "spawn",
    "upgrade",
    "rollback",
    "stop",
    "start",
    "remove",
    "fork",
    "window",
    "checkpoint",
    "restore",
    "route",
    "unroute",
];

/// The actor a request operates on, when it is an operation with a valid `actor`.
pub(super) fn operand(body: &Value) -> Option<ActorId> {
    let kind = body.get("type")?.as_str()?;
    if !OPERATIONS.contains(&kind) {
        return None;
    }
    ActorId::parse(body.get("actor")?.as_str()?).ok()
}

/// The request types, as an unknown type's error lists them.
pub const REQUESTS: [&str; 25] = [
    "spawn",
    "upgrade",
    "rollback",
    "stop",
    "start",
    "remove",
    "fork",
    "window",
    "checkpoint",
    "restore",
    "subscribe",
    "unsubscribe",
    "list",
    "principal",
    "spans",
    "route",
    "unroute",
    "routes",
    "request_secret",
    "request_grant",
    "approvals",
    "decide",
    "spend",
    "delegate",
    "dismiss",
];

/// A request's span name: `request <type>` for the known types, one name for the rest (a
/// sender's made-up types must not make span names without bound).
fn request_span_name(kind: &str) -> &'static str {
    match REQUESTS.iter().position(|known| *known == kind) {
        Some(i) => REQUEST_SPANS[i],
        None => "request (unknown)",
    }
}

const REQUEST_SPANS: [&str; 25] = [
    "request spawn",
    "request upgrade",
    "request rollback",
    "request stop",
    "request start",
    "request remove",
    "request fork",
    "request window",
    "request checkpoint",
    "request restore",
    "request subscribe",
    "request unsubscribe",
    "request list",
    "request principal",
    "request spans",
    "request route",
    "request unroute",
    "request routes",
    "request request_secret",
    "request request_grant",
    "request approvals",
    "request decide",
    "request spend",
    "request delegate",
    "request dismiss",
];

/// A request failed: the reason goes back to the requester.
type Answer<T = Value> = Result<T, String>;

/// Who asked for a rollback, which decides whether it is held to its owner's limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Asked {
    /// A `rollback` or a rewind's `restore`: it may not raise memory past the owner's limit.
    ByPrincipal,
    /// The broker's own, after an upgrade's crash loop: it puts back what ran before, and
    /// refusing it would leave the actor crashing.
    AfterCrashLoop,
}

impl Broker {
    /// Answers one request; the reply is a message to the requester with `reply_to` set.
    pub(super) async fn answer(self: Arc<Self>, request: Arc<Envelope>, body: Value) {
        let kind = body.get("type").and_then(Value::as_str).unwrap_or("");
        if matches!(kind, "undeliverable" | "shutdown") {
            return;
        }
        self.counters.request(kind);
        let mut span = Span::start(request_span_name(kind), Some(request.trace));
        span.set("sausage.request", kind.to_string());
        span.set("sausage.from", request.from.to_string());
        let trace = span.trace();
        let answer = traces::handling(trace, async {
            let principal = self.principal(&request).await;
            match self.principal_allows(&principal, kind, &body).await {
                Err(refusal) => Err(refusal),
                Ok(()) => self.answer_allowed(&request, &principal, kind, &body).await,
            }
        })
        .await;
        if let Err(reason) = &answer {
            span.fail(reason.clone());
        }
        span.end();
        let reply = answer
            .unwrap_or_else(|reason| json!({"type": "error", "request": kind, "reason": reason}));
        let mut out = Outgoing::new(&request.from, &reply).replying_to(Some(&request.id));
        out.trace = Some(trace);
        self.send(&ActorId::broker(), out).await;
    }

    /// Every request is checked for the person it acts for (DESIGN §18), before anything
    /// happens: one that acts for nobody may only read.
    async fn principal_allows(
        &self,
        principal: &Principal,
        kind: &str,
        body: &Value,
    ) -> Answer<()> {
        let known = REQUESTS.contains(&kind);
        match principal {
            _ if !known || crate::people::tiers::READ_ONLY.contains(&kind) => Ok(()),
            Principal::Nobody(why) => Err(format!(
                "`{kind}` refused: {why}; only a person (or an actor, for its owner) may change \
                 the world"
            )),
            Principal::Person(speaker) => {
                let actor = body.get("actor").and_then(Value::as_str);
                self.may_ask(speaker, kind, actor).await
            }
        }
    }

    /// Whether `speaker` may make the request `kind` on `actor`, whose owner the registry
    /// records (`people::tiers`); the web console asks the same before it sends one.
    pub async fn may_ask(&self, speaker: &Speaker, kind: &str, actor: Option<&str>) -> Answer<()> {
        let people = self.people_now().await?;
        let (owner, surface) = match actor {
            Some(actor) => {
                let registry = self.registry().await;
                let owner = registry
                    .actors
                    .contains_key(actor)
                    .then(|| people.owner_of(&registry, actor));
                (owner, people.is_surface(actor))
            }
            None => (None, false),
        };
        let owner = owner.as_ref().and_then(Principal::person);
        crate::people::tiers::may_ask(
            speaker,
            kind,
            actor,
            owner.map(|o| o.person.as_str()),
            surface,
        )
    }

    /// Answers a request its sender may make.
    async fn answer_allowed(
        self: &Arc<Self>,
        request: &Envelope,
        principal: &Principal,
        kind: &str,
        body: &Value,
    ) -> Answer {
        match kind {
            "spawn" => self.spawn(request, principal, body).await,
            "delegate" => self.delegate(request, principal, body).await,
            "dismiss" => self.dismiss(request, body).await,
            "upgrade" => {
                let started = std::time::Instant::now();
                let answer = self.upgrade(request, principal, body).await;
                if matches!(&answer, Ok(reply) if reply["type"] == "upgraded") {
                    let seconds = started.elapsed().as_secs_f64();
                    self.counters.durations.upgrades.observe(seconds);
                }
                answer
            }
            "rollback" => self.rollback(principal, body).await,
            "remove" => {
                let id = actor_field(body)?;
                let what = [(HeldAction::Remove, format!("remove `{id}`"))];
                match self.hold_if(request, principal, &what).await? {
                    Some(held) => Ok(held),
                    None => self.remove(body).await,
                }
            }
            "stop" => self.stop(body).await,
            "start" => self.start_actor(body).await,
            "fork" => self.fork(request, principal, body).await,
            "window" => self.window(body).await,
            "checkpoint" => self.checkpoint(body).await,
            "restore" => self.restore(body).await,
            "subscribe" => self.subscribe(request, body, true).await,
            "unsubscribe" => self.subscribe(request, body, false).await,
            "list" => Ok(self.list().await),
            "spans" => self.spans(request, body),
            "route" => self.route(body).await,
            "unroute" => self.unroute(body).await,
            "routes" => self.list_routes(body).await,
            "request_secret" => self.request_secret(request, principal, body).await,
            "request_grant" => self.request_grant(request, principal, body).await,
            "approvals" => self.list_approvals(principal).await,
            "decide" => self.decide_asked(request, principal, body).await,
            "spend" => self.spend(request, principal, body).await,
            "principal" => {
                let actor = actor_field(body)?;
                if !self.registry().await.actors.contains_key(actor.as_str()) {
                    return Err(format!(
                        "no actor `{actor}`; `list` shows the actors and their owners"
                    ));
                }
                super::principal::answer(&actor, &self.principal_of_actor(&actor).await)
            }
            "" => Err(format!(
                "a request needs a string `type`; known requests: {}",
                REQUESTS.join(", ")
            )),
            "unreadable" => Err(format!(
                "{}; send a JSON object the broker can read",
                body["reason"]
                    .as_str()
                    .unwrap_or("the request cannot be read")
            )),
            other => Err(format!(
                "unknown request `{other}`; known requests: {}",
                REQUESTS.join(", ")
            )),
        }
    }

    /// `spawn`: compile, test on scratch copies, then install as version 1 and start.
    async fn spawn(&self, request: &Envelope, principal: &Principal, body: &Value) -> Answer {
        let id = actor_field(body)?;
        if id.is_native() {
            return Err(format!(
                "`{id}` is a native actor's id; choose another name"
            ));
        }
        if self.registry().await.actors.contains_key(id.as_str()) {
            return Err(format!(
                "actor `{id}` already exists; send `upgrade` to install a new version"
            ));
        }
        let owner = self.owner_of_spawn(principal, body).await?;
        let hosts = self.asked_hosts(request, body).await;
        let mut actions = vec![(HeldAction::Spawn, format!("spawn `{id}`"))];
        if !hosts.is_empty() {
            let what = format!("spawn `{id}`, which may reach {}", hosts.join(", "));
            actions.insert(0, (HeldAction::Network, what));
        }
        if let Some(held) = self.hold_if(request, principal, &actions).await? {
            return Ok(held);
        }
        let version = 1;
        let candidate = self
            .candidate(request, principal, body, &id, version)
            .await?;
        let routes = candidate.routes()?;
        let tier = principal.person().map(|speaker| speaker.tier);
        self.check_routes(&id, tier, &routes, true).await?;
        let growth = Growth {
            actors: 1,
            memory_mb: u64::from(candidate.memory_mb()),
        };
        let _admitted = self.admit(&owner, growth).await?;
        self.store_version(&id, version, &candidate)
            .await
            .and_then(|()| self.world.create_actor_dirs(&id))
            .and_then(|()| self.world.install_source(&id, version))
            .map_err(|e| format!("cannot install `{id}`: {e:#}"))?;
        self.start_new(&id, version, owner, candidate.program, None)
            .await?;
        if let Err(e) = self.take_routes(&id, tier, routes, true).await {
            tracing::warn!("actor {id}: runs without the routes of its actor.json: {e}");
        }
        let mut spawned = json!({
            "type": "spawned", "actor": id.as_str(), "version": version, "tests": candidate.report,
        });
        let urls = self.route_urls(&id).await;
        if !urls.is_empty() {
            spawned["urls"] = json!(urls);
        }
        Ok(spawned)
    }

    /// Records a new actor, installed as `version`, in the registry and starts it (on a
    /// cluster, where placement puts it).
    pub(super) async fn start_new(
        &self,
        id: &ActorId,
        version: u32,
        owner: String,
        program: Program,
        subagent: Option<crate::world::SubAgent>,
    ) -> Result<(), String> {
        // A sub-agent runs beside its parent, where its grant of the model token was made.
        let here = subagent.is_some();
        self.update_registry(|registry| {
            registry.actors.insert(
                id.to_string(),
                ActorEntry {
                    version,
                    next_version: version + 1,
                    running: true,
                    owner: Some(owner),
                    subagent,
                },
            );
        })
        .await
        .map_err(|e| format!("{e:#}"))?;
        let status = self.world.read_status(id).unwrap_or_default();
        let host = match &self.cluster {
            Some(cluster) => Some(
                cluster
                    .placement
                    .place_new(id, here)
                    .await
                    .map_err(|e| format!("{e:#}"))?,
            ),
            None => None,
        };
        match (&host, &self.cluster) {
            // The host placement chose starts it from the shared version.
            (Some(host), Some(cluster)) if host != cluster.placement.host() => {
                self.router.add(id);
            }
            _ => {
                let preread = super::supervisor::Preread::read(&self.world, id);
                self.supervise(id, version, program, true, status, preread)
            }
        }
        Ok(())
    }

    /// `window`: the messages `actor` read last, as its window keeps them (DESIGN §21), with
    /// their ids, for a `fork`.
    async fn window(&self, body: &Value) -> Answer {
        let id = actor_field(body)?;
        self.known_wasm_actor(&id).await?;
        let reads = self
            .router
            .mailbox(&id)
            .and_then(|m| m.window().map(|w| w.reads()))
            .unwrap_or_default();
        let messages: Vec<Value> = reads
            .iter()
            .map(|read| {
                json!({
                    "id": read.envelope.id, "from": read.envelope.from.as_str(),
                    "at": chrono::DateTime::<chrono::Utc>::from(read.at)
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                    "body": read.envelope.body_value(),
                })
            })
            .collect();
        Ok(json!({"type": "window", "actor": id.as_str(), "messages": messages}))
    }

    /// `fork`: a new actor `as`, running `actor`'s version on `actor`'s files as they were just
    /// before the message `before` of its window: the window's snapshot, with the running
    /// version fed the messages before that one (DESIGN §21).
    async fn fork(&self, request: &Envelope, principal: &Principal, body: &Value) -> Answer {
        let from = actor_field(body)?;
        let before = string_field(body, "before")?;
        let fork = ActorId::parse(string_field(body, "as")?).map_err(|e| format!("`as`: {e}"))?;
        if fork.is_native() {
            return Err(format!(
                "`{fork}` is a native actor's id; choose another name"
            ));
        }
        if self.registry().await.actors.contains_key(fork.as_str()) {
            return Err(format!(
                "actor `{fork}` already exists; choose another name for the fork (`as`)"
            ));
        }
        self.known_wasm_actor(&from).await?;
        let owner = self.owner_of_spawn(principal, body).await?;
        let memory_mb = limits::memory_mb(&self.world.manifest(&from));
        let growth = Growth {
            actors: 1,
            memory_mb: u64::from(memory_mb),
        };
        let _admitted = self.admit(&owner, growth).await?;
        let version = self.registry().await.actors[from.as_str()].version;
        let window = self
            .router
            .mailbox(&from)
            .and_then(|m| m.window().cloned())
            .ok_or_else(|| no_window(&from))?;
        let wasm = self.world.version_dir(&from, version).join("actor.wasm");
        let program = self
            .compile_file(&wasm)
            .await
            .map_err(|e| format!("version {version} of `{from}` cannot run: {e}"))?;
        let scratch = self.world.scratch_dir().join(format!("{fork}-fork"));
        let copied = {
            let (window, scratch) = (window.clone(), scratch.clone());
            tokio::task::spawn_blocking(move || {
                window.copy(&scratch.join("data"), &scratch.join("public"))
            })
            .await
            .map_err(|e| format!("host bug: copying the window failed: {e}"))?
        };
        let forked = async {
            let reads = copied
                .map_err(|e| format!("cannot copy `{from}`'s files: {e}"))?
                .ok_or_else(|| no_window(&from))?
                .reads;
            let Some(index) = reads.iter().position(|r| r.envelope.id == before) else {
                let (first, last) = (&reads[0].envelope.id, &reads[reads.len() - 1].envelope.id);
                return Err(format!(
                    "`{before}` is not a message of `{from}`'s window, which holds the {} it \
                     read last ({first} to {last}); `{{\"type\":\"window\",\"actor\":\"{from}\"}}` \
                     lists them",
                    reads.len()
                ));
            };
            let running = shadow::Version {
                number: version,
                program: &program,
                memory_mb,
            };
            shadow::replay(
                &self.runtime,
                &self.world,
                &from,
                running,
                &scratch,
                &reads[..index],
            )
            .await;
            let candidate = Candidate {
                program: program.clone(),
                report: Value::Null,
                wasm_file: wasm.clone(),
                source: Some(self.world.version_dir(&from, version).join("source")),
                meta: json!({
                    "version": 1,
                    "wasm": wasm,
                    "forked_from": {"actor": from.as_str(), "version": version, "before": before},
                    "requested_by": request.from.as_str(),
                    "requested_for": principal.person().map(|p| p.person.as_str()),
                    "time": now_rfc3339(),
                }),
            };
            self.store_version(&fork, 1, &candidate)
                .await
                .and_then(|()| self.world.create_actor_dirs(&fork))
                .and_then(|()| self.world.install_source(&fork, 1))
                .and_then(|()| {
                    for (part, target) in [
                        ("data", self.world.data_dir(&fork)),
                        ("public", self.world.public_dir(&fork)),
                    ] {
                        std::fs::remove_dir_all(&target)?;
                        std::fs::rename(scratch.join(part), &target)?;
                    }
                    Ok(())
                })
                .map_err(|e| format!("cannot install `{fork}`: {e:#}"))?;
            if let Some(cluster) = &self.cluster {
                cluster
                    .shared
                    .snapshot(&self.world, &fork)
                    .await
                    .map_err(|e| format!("cannot share `{fork}`'s files: {e:#}"))?;
            }
            Ok(index)
        }
        .await;
        let _ = std::fs::remove_dir_all(&scratch);
        let replayed = forked?;
        self.start_new(&fork, 1, owner, program, None).await?;
        Ok(json!({
            "type": "forked", "actor": fork.as_str(), "from": from.as_str(), "version": version,
            "before": before, "replayed": replayed,
        }))
    }

    /// `upgrade`: a new numbered version, tested on scratch copies of the actor's files, then
    /// swapped in: hold the mailbox, stop gracefully, snapshot, install the source, start.
    async fn upgrade(&self, request: &Envelope, principal: &Principal, body: &Value) -> Answer {
        let id = actor_field(body)?;
        let mode = shadow::Mode::of(body)?;
        let handle = self.known_wasm_actor(&id).await?;
        let entry = self.registry().await.actors[id.as_str()].clone();
        let (previous, version) = (entry.version, entry.next_version);
        let reached = self.world.manifest(&id).network.unwrap_or_default();
        let hosts: Vec<String> = (self.asked_hosts(request, body).await.into_iter())
            .filter(|host| !reached.contains(host))
            .collect();
        let mut actions = vec![(HeldAction::Upgrade, format!("upgrade `{id}`"))];
        if !hosts.is_empty() {
            let what = format!("upgrade `{id}` so that it may reach {}", hosts.join(", "));
            actions.insert(0, (HeldAction::Network, what));
        }
        if let Some(held) = self.hold_if(request, principal, &actions).await? {
            return Ok(held);
        }
        let mut candidate = self
            .candidate(request, principal, body, &id, version)
            .await?;
        let routes = candidate.routes()?;
        let tier = self.owner_tier(&id).await?;
        self.check_routes(&id, tier, &routes, true).await?;
        let shadow = match mode {
            shadow::Mode::Off => None,
            mode => {
                let outcome = self
                    .shadow(&id, previous, &candidate, version, mode)
                    .await?;
                if let Some(reason) = outcome.refusal {
                    // Refused, with the report beside the reason; nothing was stored.
                    return Ok(json!({
                        "type": "error", "request": "upgrade", "reason": reason,
                        "shadow": outcome.report,
                    }));
                }
                // Kept with the version, for the web page to show beside it.
                candidate.meta["shadow"] = outcome.report.clone();
                Some(outcome.report)
            }
        };
        let running_mb = limits::memory_mb(&self.world.manifest(&id));
        let _admitted = self
            .admit_memory(&id, running_mb, candidate.memory_mb())
            .await?;
        self.store_version(&id, version, &candidate)
            .await
            .map_err(|e| format!("cannot store version {version} of `{id}`: {e:#}"))?;

        // The swap. From the stop on, messages wait in the mailbox until the new instance runs.
        handle.stop().await;
        let mut parts = self.world.snapshot_parts(&id, previous);
        parts.extend(self.world.source_parts(&id, version));
        let swapped = self
            .swap_in(&id, version, parts, |entry| {
                entry.next_version = version + 1
            })
            .await;
        if let Err(e) = swapped {
            // Nothing changed: the old version is still installed; put it back to work.
            self.discard_version(&id, version);
            if entry.running {
                handle.start().await;
            }
            return Err(format!("{e}; version {previous} keeps running"));
        }
        let dropped = self.code_replaced(&id, principal).await;
        let upgraded = Upgraded {
            requester: request.from.clone(),
            request_id: request.id.clone(),
            previous,
        };
        handle
            .install(Install {
                version,
                program: candidate.program,
                redeliver_parked: true,
                watch: Some(upgraded),
            })
            .await;
        if entry.running {
            handle.start().await;
        }
        if let Err(e) = self.take_routes(&id, tier, routes, true).await {
            tracing::warn!("actor {id}: version {version} runs with the routes it had: {e}");
        }
        if let Some(cluster) = &self.cluster
            && let Err(e) = cluster.shared.snapshot(&self.world, &id).await
        {
            tracing::warn!("{e:#}");
        }
        let mut reply = json!({
            "type": "upgraded", "actor": id.as_str(), "version": version, "previous": previous,
            "tests": candidate.report,
        });
        if let Some(shadow) = shadow {
            reply["shadow"] = shadow;
        }
        if !dropped.is_empty() {
            reply["grants_dropped"] = json!(dropped);
        }
        let urls = self.route_urls(&id).await;
        if !urls.is_empty() {
            reply["urls"] = json!(urls);
        }
        Ok(reply)
    }

    /// The shadow run of an upgrade (DESIGN §21): `candidate` (to be `version`) and the running
    /// `previous`, each fed the actor's window on copies of its files, compared.
    async fn shadow(
        &self,
        id: &ActorId,
        previous: u32,
        candidate: &Candidate,
        version: u32,
        mode: shadow::Mode,
    ) -> Result<shadow::Outcome, String> {
        let running = self
            .compile_file(&self.world.version_dir(id, previous).join("actor.wasm"))
            .await
            .map_err(|e| {
                format!(
                    "the running version {previous} of `{id}` cannot run for the shadow run \
                     ({e}); upgrade with \"shadow\": \"off\" to skip it"
                )
            })?;
        let old = shadow::Version {
            number: previous,
            program: &running,
            memory_mb: limits::memory_mb(&self.world.manifest(id)),
        };
        let new = shadow::Version {
            number: version,
            program: &candidate.program,
            memory_mb: candidate.memory_mb(),
        };
        let window = self.router.mailbox(id).and_then(|m| m.window().cloned());
        let mut span = Span::start("shadow run", None);
        span.set("sausage.actor", id.to_string());
        span.set("sausage.version", i64::from(version));
        let outcome = shadow::run(
            &self.runtime,
            &self.world,
            id,
            window.as_ref(),
            old,
            new,
            mode,
        )
        .await;
        match &outcome {
            Ok(outcome) => {
                let report = &outcome.report;
                span.set(
                    "sausage.shadow.messages",
                    report["messages"].as_i64().unwrap_or(0),
                );
                span.set(
                    "sausage.shadow.different",
                    report["different"].as_array().map_or(0, Vec::len) as i64,
                );
            }
            Err(reason) => span.fail(reason.clone()),
        }
        span.end();
        outcome
    }

    /// `rollback`: to `version`, or to the highest older version.
    /// `id`'s code was replaced for `principal`: new code keeps the secrets granted to the
    /// old only when an owner or their giver put it there (DESIGN §25). The secrets dropped.
    async fn code_replaced(&self, id: &ActorId, principal: &Principal) -> Vec<String> {
        let by = match principal.person() {
            Some(person) if person.tier == Tier::Owner => return Vec::new(),
            by => by.map(|p| p.person.to_string()),
        };
        let (secrets, id) = (crate::secrets::Secrets::new(&self.world), id.clone());
        let dropped = tokio::task::spawn_blocking(move || {
            secrets
                .code_replaced(&id, by.as_deref())
                .unwrap_or_else(|e| {
                    tracing::error!("actor {id}: its grants could not be checked: {e:#}");
                    Vec::new()
                })
        });
        dropped.await.unwrap_or_default()
    }

    async fn rollback(&self, principal: &Principal, body: &Value) -> Answer {
        let id = actor_field(body)?;
        let target = match body.get("version") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| format!("`version` must be a version number, not {v}"))?,
            ),
        };
        let mut rolled = self.roll_back(&id, target, None, Asked::ByPrincipal).await;
        if let Ok(reply) = &mut rolled {
            Counters::add(&self.counters.rollbacks, 1);
            let dropped = self.code_replaced(&id, principal).await;
            if !dropped.is_empty() {
                reply["grants_dropped"] = json!(dropped);
            }
        }
        rolled
    }

    /// Rolls `id` back (or forward) to `target`: snapshots the current state into the current
    /// version first, so the move can be undone, then restores the target's snapshot. Runs on
    /// the actor's operation queue.
    /// With `files`, the `data` and `public` there are restored instead of the target's
    /// snapshot, and the target may be the current version (a rewind's checkpoint).
    pub(super) async fn roll_back(
        &self,
        id: &ActorId,
        target: Option<u32>,
        files: Option<&Path>,
        asked: Asked,
    ) -> Answer {
        let handle = self.known_wasm_actor(id).await?;
        let entry = self.registry().await.actors[id.as_str()].clone();
        let current = entry.version;
        let stored = self.world.versions(id);
        let target = match target {
            Some(target) if target == current && files.is_none() => {
                return Err(format!("`{id}` already runs version {current}"));
            }
            Some(target) if stored.contains(&target) => target,
            Some(target) => {
                return Err(format!(
                    "`{id}` has no version {target}; stored versions: {}",
                    list_numbers(&stored)
                ));
            }
            None => *stored.iter().rev().find(|v| **v < current).ok_or_else(|| {
                format!("`{id}` has no version older than {current} to roll back to")
            })?,
        };
        let _admitted = match asked {
            Asked::ByPrincipal => {
                let source = self.world.version_dir(id, target).join("source");
                let (running_mb, target_mb) = (
                    limits::memory_mb(&self.world.manifest(id)),
                    limits::memory_mb(&read_manifest(&source)),
                );
                Some(self.admit_memory(id, running_mb, target_mb).await?)
            }
            Asked::AfterCrashLoop => None,
        };
        let wasm = self.world.version_dir(id, target).join("actor.wasm");
        let program = self
            .compile_file(&wasm)
            .await
            .map_err(|e| format!("version {target} of `{id}` cannot run: {e}"))?;

        // Snapshot the current state (so the move can be undone), restore the target's, install
        // its source: all of it, or none.
        handle.stop().await;
        let mut parts = self.world.snapshot_parts(id, current);
        let restore = match files {
            Some(files) => Some(vec![
                (files.join("data"), self.world.data_dir(id)),
                (files.join("public"), self.world.public_dir(id)),
            ]),
            None => self.world.restore_parts(id, target),
        };
        let restored = restore.is_some();
        parts.extend(restore.into_iter().flatten());
        parts.extend(self.world.source_parts(id, target));
        if let Err(e) = self.swap_in(id, target, parts, |_| {}).await {
            if entry.running {
                handle.start().await;
            }
            return Err(format!("{e}; version {current} keeps running"));
        }
        // The window keeps its messages, from the files restored (DESIGN §21): the next
        // candidate's shadow run still replays the actor's own traffic.
        if restored && let Some(window) = self.router.mailbox(id).and_then(|m| m.window().cloned())
        {
            window.rebase();
        }
        handle
            .install(Install {
                version: target,
                program,
                redeliver_parked: false,
                watch: None,
            })
            .await;
        if entry.running {
            handle.start().await;
        }
        Ok(json!({
            "type": "rolled_back", "actor": id.as_str(), "from": current, "to": target,
            "restored_state": restored,
        }))
    }

    /// Makes `version` the installed version of `id`: swaps in the folders of `parts` (built
    /// and swapped on a worker thread, as they may hold many files), then saves the registry
    /// with the entry's version set and `also` applied. All of it, or on an error nothing: a
    /// registry that cannot be saved swaps the folders back. The swap is logged with `version`,
    /// so a kill before the registry names it is settled at the next start.
    async fn swap_in(
        &self,
        id: &ActorId,
        version: u32,
        parts: Vec<(PathBuf, PathBuf)>,
        also: impl FnOnce(&mut ActorEntry),
    ) -> Result<(), String> {
        let log = self.world.swap_log_path(id);
        let note = json!({ "version": version });
        let applied = tokio::task::spawn_blocking(move || {
            Replacement::prepare(parts)?.apply_logged(log, note)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(format!("the swap failed: {e}"))))
        .map_err(|e| {
            format!("actor {id}: cannot snapshot its files and install version {version}: {e}")
        })?;
        let saved = self
            .update_registry(|registry| {
                let entry = registry.actors.get_mut(id.as_str()).expect("a known actor");
                entry.version = version;
                also(entry);
            })
            .await;
        if saved.is_ok() {
            // Final: the old trees go, off the world's thread.
            drop(tokio::task::spawn_blocking(move || applied.finish()));
        } else {
            applied.undo();
        }
        saved.map_err(|e| format!("{e:#}"))
    }

    /// A crash loop after an upgrade: roll back to the previous version and tell whoever asked
    /// for the upgrade.
    pub(super) async fn recover(self: Arc<Self>, report: CrashLoop) {
        let id = report.actor;
        let reason = format!(
            "version {} of `{id}` crashed {CRASH_LOOP_CRASHES} times within {} s of its upgrade \
             (last: {})",
            report.version,
            CRASH_LOOP_WINDOW.as_secs(),
            report.last_exit
        );
        let body = match self
            .roll_back(
                &id,
                Some(report.upgrade.previous),
                None,
                Asked::AfterCrashLoop,
            )
            .await
        {
            Ok(mut body) => {
                Counters::add(&self.counters.rollbacks, 1);
                Counters::add(&self.counters.automatic_rollbacks, 1);
                body["reason"] = json!(reason);
                body
            }
            Err(e) => json!({
                "type": "error", "request": "upgrade",
                "reason": format!("{reason}; rolling back failed: {e}"),
            }),
        };
        self.world.log_note(&id, &format!("crash loop: {body}"));
        let out = Outgoing::new(&report.upgrade.requester, &body)
            .replying_to(Some(&report.upgrade.request_id));
        self.send(&ActorId::broker(), out).await;
    }

    /// `remove`: stops the actor and moves every folder of it into `archive/`, with the
    /// messages still in its mailbox. Nothing is deleted.
    pub(super) async fn remove(&self, body: &Value) -> Answer {
        let id = actor_field(body)?;
        let handle = self.known_wasm_actor(&id).await?;
        let was_running = handle.stop().await.is_some();
        // A removal that fails changes nothing: the folders come back, the waiting messages stay
        // in the mailbox, and an actor that ran runs again.
        let undo = |why: String| async move {
            if was_running {
                handle.start().await;
            }
            Err(format!("{why}; nothing was removed"))
        };
        let mailbox = self.router.remove(&id);
        let archive = match self.world.archive(&id) {
            Ok(archive) => archive,
            Err(e) => {
                if let Some(mailbox) = mailbox {
                    self.router.restore(&id, mailbox);
                }
                return undo(format!("{e:#}")).await;
            }
        };
        if let Some(mailbox) = &mailbox {
            let kept = mailbox.drain(|waiting| {
                if waiting.is_empty() {
                    return Ok(());
                }
                let lines: Vec<u8> = waiting.iter().flat_map(|m| m.to_line()).collect();
                crate::fs::write_atomically(&archive.join("mailbox.jsonl"), &lines)
                    .map_err(|e| format!("actor {id}: cannot archive its mailbox: {e}"))
            });
            if let Err(why) = kept {
                self.router.restore(&id, mailbox.clone());
                if let Err(e) = self.world.unarchive(&id, &archive) {
                    tracing::error!("{e:#}");
                }
                return undo(why).await;
            }
        }
        self.actors.lock().expect("actors lock").remove(&id);
        self.update_registry(|registry| {
            registry.actors.remove(id.as_str());
            registry
                .routes
                .retain(|_, route| route.actor != id.as_str());
            registry.subscriptions.remove(id.as_str());
            for subscribers in registry.subscriptions.values_mut() {
                subscribers.retain(|s| s != id.as_str());
            }
        })
        .await
        .map_err(|e| format!("{e:#}"))?;
        if let Some(cluster) = &self.cluster {
            cluster.placement.forget_actor(&id).await;
        }
        let secrets = crate::secrets::Secrets::new(&self.world);
        let removed = id.clone();
        match tokio::task::spawn_blocking(move || secrets.actor_removed(&removed)).await {
            Ok(Err(e)) => tracing::warn!("actor {id}: its grants stay: {e:#}"),
            Err(e) => tracing::error!("host bug: {e}"),
            Ok(Ok(_)) => {}
        }
        let archive = archive
            .strip_prefix(self.world.root())
            .unwrap_or(&archive)
            .display()
            .to_string();
        Ok(json!({"type": "removed", "actor": id.as_str(), "archive": archive}))
    }

    /// Reads, compiles and tests the version a `spawn` or `upgrade` names.
    /// A path a request names, on this host: as `World::resolve_request_path` has it, or, on
    /// a cluster, a file another host shipped with the request it forwarded (`cluster:…`).
    async fn request_path(&self, request: &Envelope, path: &str) -> Result<PathBuf, String> {
        match (
            &self.cluster,
            path.strip_prefix(super::ports::SHIPPED_PREFIX),
        ) {
            // Only the files shipped with this very request: a request names no other's.
            (Some(cluster), Some(name))
                if name.starts_with(&format!("shipped/{}/", request.id.replace('/', "-"))) =>
            {
                cluster
                    .shared
                    .fetch_shipped(&self.world, name)
                    .await
                    .map_err(|e| format!("`{path}`: {e:#}"))
            }
            (Some(_), Some(_)) => Err(format!(
                "`{path}` names files shipped with another request; name your own files"
            )),
            _ => self.world.resolve_request_path(&request.from, path),
        }
    }

    /// The hosts the `actor.json` of a spawn's or upgrade's `source` lets it reach (none when
    /// it cannot be read: the candidate's own checks then say why).
    async fn asked_hosts(&self, request: &Envelope, body: &Value) -> Vec<String> {
        let Some(path) = body.get("source").and_then(Value::as_str) else {
            return Vec::new();
        };
        match self.request_path(request, path).await {
            Ok(dir) => tokio::task::spawn_blocking(move || read_manifest(&dir).network)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// `decide {approval, approve}`: a person's decision, through a surface other than the
    /// agent (Matrix); never with a secret's value, which a room must not see.
    async fn decide_asked(
        self: &Arc<Self>,
        request: &Envelope,
        principal: &Principal,
        body: &Value,
    ) -> Answer {
        let surface = self.people_now().await?.is_surface(request.from.as_str());
        if request.from.as_str() == "agent" || !(surface || request.from.is_native()) {
            return Err(format!(
                "`decide` comes from a person (the web page, the console or Matrix), not from \
                 actor {}",
                request.from
            ));
        }
        if body.get("value").is_some() {
            return Err(
                "a secret's value is never taken from a message; set it on the web \
                        page or at the console"
                    .into(),
            );
        }
        let Some(speaker) = principal.person() else {
            return Err("`decide` needs the person who decides".into());
        };
        let id = string_field(body, "approval")?;
        let Some(approve) = body.get("approve").and_then(Value::as_bool) else {
            return Err("`approve` must be true (approve) or false (deny)".into());
        };
        self.decide(super::holds::Deciding {
            id,
            by: speaker,
            approve,
            value: None,
        })
        .await
        .map_err(|undecided| undecided.to_string())
    }

    async fn candidate(
        &self,
        request: &Envelope,
        principal: &Principal,
        body: &Value,
        id: &ActorId,
        version: u32,
    ) -> Result<Candidate, String> {
        let wasm_path = string_field(body, "wasm")?;
        let wasm_file = self.request_path(request, wasm_path).await?;
        let source = match body.get("source") {
            None | Some(Value::Null) => None,
            Some(Value::String(path)) => {
                let dir = self.request_path(request, path).await?;
                if !dir.is_dir() {
                    return Err(format!("source `{path}` is not a folder"));
                }
                Some(dir)
            }
            Some(_) => return Err("`source` must be a string path to a folder".into()),
        };
        let built_by = optional_string(body, "built_by")?.map(str::to_owned);
        let program = self
            .compile_file(&wasm_file)
            .await
            .map_err(|e| format!("`{wasm_path}`: {e}"))?;
        let mut span = Span::start("test", None);
        span.set("sausage.actor", id.to_string());
        span.set("sausage.version", i64::from(version));
        let tested = candidate::test(
            &self.runtime,
            &self.world,
            id,
            version,
            &program,
            source.as_deref(),
        )
        .await;
        if let Err(reason) = &tested {
            span.fail(reason.clone());
        }
        span.end();
        let report = tested
            .map_err(|reason| format!("version {version} of `{id}` was rejected: {reason}"))?;
        Ok(Candidate {
            program,
            report,
            wasm_file,
            source,
            meta: json!({
                "version": version,
                "wasm": wasm_path,
                "source": body.get("source"),
                "built_by": built_by,
                "requested_by": request.from.as_str(),
                "requested_for": principal.person().map(|p| p.person.as_str()),
                "time": now_rfc3339(),
            }),
        })
    }

    /// Reads and compiles a `.wasm` off the async threads.
    pub(super) async fn compile_file(&self, path: &Path) -> Result<Program, String> {
        let (path, runtime) = (path.to_owned(), self.runtime.clone());
        tokio::task::spawn_blocking(move || {
            let bytes = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
            runtime.compile(&bytes).map_err(|e| format!("{e:#}"))
        })
        .await
        .map_err(|e| format!("host bug: compiling failed: {e}"))?
    }

    /// Stores a tested candidate as `broker/versions/<id>/<version>/` (`actor.wasm`, `source/`,
    /// `meta.json`), built under a hidden name and renamed into place, on a worker thread: the
    /// folder is whole or absent.
    pub(super) async fn store_version(
        &self,
        id: &ActorId,
        version: u32,
        candidate: &Candidate,
    ) -> anyhow::Result<()> {
        let dir = self.world.version_dir(id, version);
        let (wasm, source) = (candidate.wasm_file.clone(), candidate.source.clone());
        let meta = serde_json::to_vec_pretty(&candidate.meta).expect("meta serialises");
        let store = move || -> std::io::Result<()> {
            if dir.exists() {
                // A leftover of an attempt that failed after storing: the number was never used.
                std::fs::remove_dir_all(&dir)?;
            }
            let parent = dir.parent().expect("inside broker/versions/<id>");
            std::fs::create_dir_all(parent)?;
            let staged = crate::fs::create_temporary_dir(parent)?;
            let built = (|| {
                std::fs::copy(&wasm, staged.join("actor.wasm"))?;
                match &source {
                    Some(source) => crate::fs::copy_tree(source, &staged.join("source"))?,
                    None => std::fs::create_dir_all(staged.join("source"))?,
                }
                crate::fs::write_atomically(&staged.join("meta.json"), &meta)?;
                std::fs::rename(&staged, &dir)
            })();
            if built.is_err() {
                let _ = std::fs::remove_dir_all(&staged);
            }
            built
        };
        tokio::task::spawn_blocking(store)
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(format!("storing failed: {e}"))))?;
        if let Some(cluster) = &self.cluster {
            cluster
                .shared
                .upload_version(&self.world, id, version)
                .await?;
        }
        Ok(())
    }

    /// Removes a stored version that never ran (its swap failed), so no request can reach it.
    fn discard_version(&self, id: &ActorId, version: u32) {
        let dir = self.world.version_dir(id, version);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(
                "{}: cannot remove ({e}); the next upgrade replaces it",
                dir.display()
            );
        }
    }

    async fn stop(&self, body: &Value) -> Answer {
        let id = actor_field(body)?;
        let handle = self.known_wasm_actor(&id).await?;
        self.set_running(&id, false).await?;
        let exit = handle.stop().await;
        Ok(json!({
            "type": "stopped",
            "actor": id.as_str(),
            "exit": exit.map(|e| e.to_string()),
        }))
    }

    async fn start_actor(&self, body: &Value) -> Answer {
        let id = actor_field(body)?;
        let handle = self.known_wasm_actor(&id).await?;
        self.set_running(&id, true).await?;
        handle.start().await;
        Ok(json!({"type": "started", "actor": id.as_str()}))
    }

    async fn set_running(&self, id: &ActorId, running: bool) -> Result<(), String> {
        self.update_registry(|registry| {
            if let Some(entry) = registry.actors.get_mut(id.as_str()) {
                entry.running = running;
            }
        })
        .await
        .map_err(|e| format!("{e:#}"))
    }

    pub(super) async fn known_wasm_actor(
        &self,
        id: &ActorId,
    ) -> Result<super::ActorHandle, String> {
        if let Some(handle) = self.handle(id) {
            return Ok(handle);
        }
        let known = self.known_actors().await;
        if known.get(id.as_str()) == Some(&"native") {
            return Err(format!(
                "`{id}` is a native actor; it cannot be stopped or started"
            ));
        }
        if let Some(cluster) = &self.cluster
            && known.get(id.as_str()) == Some(&"wasm")
        {
            // Known to the world, run by no live host this one can reach.
            return Err(match cluster.placement.placement_of(id.as_str()) {
                Some((host, _)) => format!(
                    "actor `{id}` runs on host {host}, which is not answering; another host \
                     takes it within {:.1} s of its last heartbeat: ask again then",
                    cluster.placement.lease_timeout().as_secs_f64()
                ),
                None => format!("actor `{id}` is being placed on a host; ask again in a moment"),
            });
        }
        let wasm: Vec<&str> = known
            .iter()
            .filter(|(_, kind)| **kind == "wasm")
            .map(|(id, _)| id.as_str())
            .collect();
        Err(format!(
            "no actor `{id}`; WASM actors: {}",
            if wasm.is_empty() {
                "none yet".into()
            } else {
                wasm.join(", ")
            }
        ))
    }

    /// `subscribe`/`unsubscribe`: the sender (un)subscribes to what `actor` publishes.
    async fn subscribe(&self, request: &Envelope, body: &Value, on: bool) -> Answer {
        let publisher = actor_field(body)?;
        let known = self.known_actors().await;
        if on && !known.contains_key(publisher.as_str()) {
            let names: Vec<&str> = known.keys().map(String::as_str).collect();
            return Err(format!(
                "no actor `{publisher}` to subscribe to; known actors: {}",
                names.join(", ")
            ));
        }
        let subscriber = request.from.to_string();
        self.update_registry(|registry| {
            let subscribers = registry
                .subscriptions
                .entry(publisher.to_string())
                .or_default();
            subscribers.retain(|s| *s != subscriber);
            if on {
                subscribers.push(subscriber);
            } else if subscribers.is_empty() {
                registry.subscriptions.remove(publisher.as_str());
            }
        })
        .await
        .map_err(|e| format!("{e:#}"))?;
        let kind = if on { "subscribed" } else { "unsubscribed" };
        Ok(json!({"type": kind, "actor": publisher.as_str()}))
    }

    /// `list`: every actor with kind, version, running, state, restarts, the messages queued
    /// in its mailbox and its instance's memory (bytes, while one runs here); and the
    /// subscriptions.
    pub async fn list(&self) -> Value {
        let registry = self.registry().await;
        let memory = self.memory_in_use();
        let mut routes: std::collections::HashMap<&str, Vec<&str>> = Default::default();
        for (path, route) in &registry.routes {
            routes.entry(route.actor.as_str()).or_default().push(path);
        }
        let mut actors = Vec::new();
        for (id, kind) in self.known_actors().await {
            let actor = ActorId::parse(&id).expect("known ids are valid");
            let status = self.world.read_status(&actor).unwrap_or_default();
            let entry = registry.actors.get(&id);
            actors.push(json!({
                "id": id,
                "kind": kind,
                "version": entry.map(|e| e.version),
                "owner": entry.and_then(|e| e.owner.as_deref()),
                "running": entry.is_none_or(|e| e.running),
                "state": if kind == "native" { json!("running") } else { json!(status.state) },
                "restarts": status.restarts,
                "queued": self.router.mailbox(&actor).map_or(0, |m| m.len()),
                "memory": memory.get(&actor).filter(|bytes| **bytes > 0),
                "routes": routes.get(id.as_str()).cloned().unwrap_or_default(),
                "subagent": entry.and_then(|e| e.subagent.as_ref()).map(|s| {
                    json!({"parent": s.parent, "role": s.role, "depth": s.depth})
                }),
            }));
            if let (Some(cluster), Some(row)) = (&self.cluster, actors.last_mut()) {
                let here = cluster.placement.host().to_string();
                let (host, state) = match cluster.placement.placement_of(&id) {
                    Some((host, state)) => (Some(host), state),
                    None if kind == "native" => (Some(here.clone()), None),
                    None => (None, None),
                };
                if let Some(state) = state.filter(|_| host.as_deref() != Some(&here)) {
                    row["state"] = json!(state);
                }
                row["host"] = json!(host);
            }
        }
        let mut list =
            json!({"type": "actors", "actors": actors, "subscriptions": registry.subscriptions});
        if let Some(cluster) = &self.cluster {
            list["hosts"] = cluster
                .placement
                .hosts()
                .into_iter()
                .map(|h| json!({"id": h.id, "alive": h.alive, "actors": h.actors}))
                .collect();
        }
        list
    }
}

impl Broker {
    /// Who owns a new actor (DESIGN §13, §18): the `owner` the request names (a person of the
    /// world, as the agent passes the person it acts for), else the person the request acts
    /// for, so an actor spawned by an actor has that actor's owner. Only owners name another.
    async fn owner_of_spawn(&self, principal: &Principal, body: &Value) -> Result<String, String> {
        let Principal::Person(speaker) = principal else {
            return Err("a spawn needs a person to own the new actor".into());
        };
        let Some(named) = optional_string(body, "owner")? else {
            return Ok(speaker.person.to_string());
        };
        let named = ActorId::parse(named)
            .map_err(|e| format!("`owner`: {}", e.replace("actor id", "person id")))?;
        if speaker.tier != Tier::Owner && named != speaker.person {
            return Err(format!(
                "`owner`: {} may spawn actors only for themselves, not for {named}",
                speaker.person
            ));
        }
        let people = self.people_now().await?;
        if !people.people.iter().any(|p| p.id == named.as_str()) {
            return Err(format!(
                "`owner`: {named} is not a person of this world; `sausage people list` shows who is"
            ));
        }
        Ok(named.to_string())
    }
}

/// Why `actor` has no window to fork from.
fn no_window(actor: &ActorId) -> String {
    format!(
        "`{actor}` keeps no messages to fork from: it read none since this host started, or \
         its actor.json sets \"window\" to 0"
    )
}

pub(super) fn string_field<'a>(body: &'a Value, name: &str) -> Result<&'a str, String> {
    match body.get(name) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(format!("missing field `{name}` (a string)")),
        Some(other) => Err(format!("field `{name}` must be a string, not {other}")),
    }
}

fn optional_string<'a>(body: &'a Value, name: &str) -> Result<Option<&'a str>, String> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => string_field(body, name).map(Some),
    }
}

fn list_numbers(numbers: &[u32]) -> String {
    let names: Vec<String> = numbers.iter().map(u32::to_string).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

pub(super) fn actor_field(body: &Value) -> Result<ActorId, String> {
    ActorId::parse(string_field(body, "actor")?)
}

/// The current time as RFC 3339 UTC, without a date library.
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm), valid for every date after 1970.
    let z = days as i64 + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
