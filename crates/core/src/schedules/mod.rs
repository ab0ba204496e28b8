//! `scheduler`, the native actor that sends messages later (DESIGN §15): `schedule` (a cron
//! pattern in a time zone, `every` so many seconds, or once `at` a time), `unschedule` and
//! `schedules`. A due message goes from `scheduler`, with `"schedule":"<id>"` in its envelope,
//! through the router like any message; one made for a person speaks for that person as they
//! are in `people.json` when it fires, one made by an actor for the actor's owner as they are
//! then. A schedule fires only while its creator may schedule (DESIGN §15, §18): while they
//! are a guest, or the actor acts for nobody, its times pass unfired with a note in the
//! scheduler's log, and it fires again once they are a member or an owner.
//!
//! It owns `/data/schedules.json` (its own data folder), replaced whole at each change; every
//! decision is in `table`, which knows no I/O. **Invariant:** a reply `scheduled` or
//! `unscheduled` is sent only once the file holds the change, and the file records a fire before
//! its message is sent (at most once, like every delivery).

pub mod clock;
pub mod table;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::broker::Broker;
use crate::broker::mailbox::Mailbox;
use crate::broker::principal::Principal;
use crate::message::{ActorId, Envelope, NATIVES, Outgoing, SCHEDULER, Speaker, Tier};
use crate::people::People;
use crate::world::HeldAction;
use clock::{Clock, LOOK_AGAIN, SystemClock};
use table::{Asker, Creator, CreatorKind, Fire, Table};

/// The file in the scheduler's `/data` that holds every schedule.
pub const SCHEDULES_FILE: &str = "schedules.json";

/// Starts the `scheduler` on the host's clock; it runs until the host stops (or the task is
/// aborted). Its mailbox exists when this returns, so no early request finds no actor.
pub fn spawn(broker: Arc<Broker>) -> tokio::task::JoinHandle<()> {
    spawn_with(broker, SystemClock)
}

/// [`spawn`] on `clock` (tests give one they move).
pub fn spawn_with(broker: Arc<Broker>, clock: impl Clock) -> tokio::task::JoinHandle<()> {
    let Some(cluster) = broker.cluster.clone() else {
        let scheduler = Scheduler::open(broker);
        return tokio::spawn(serve(scheduler, clock));
    };
    // On a cluster (DESIGN §16) one host's scheduler serves the whole world: the one holding
    // its lease; the others' routers send it every request. A new leader starts from the
    // schedules the last one shared.
    broker.native_mailbox(SCHEDULER);
    tokio::spawn(async move {
        loop {
            cluster.placement.lead(SCHEDULER).await;
            if let Err(e) = cluster
                .shared
                .take_schedules(&schedules_path(&broker))
                .await
            {
                tracing::warn!("the shared schedules: {e:#}");
            }
            let scheduler = Scheduler::open(broker.clone());
            tracing::info!("host {}: runs the scheduler", cluster.placement.host());
            tokio::select! {
                () = serve(scheduler, clock.clone()) => return,
                () = cluster.placement.lost(SCHEDULER) => {
                    tracing::info!("host {}: another host runs the scheduler now", cluster.placement.host());
                }
            }
        }
    })
}

fn schedules_path(broker: &Broker) -> PathBuf {
    let me = ActorId::parse(SCHEDULER).expect("a valid id");
    broker.world.data_dir(&me).join(SCHEDULES_FILE)
}

async fn serve(mut scheduler: Scheduler, clock: impl Clock) {
    loop {
        scheduler.pass(clock.now()).await;
        let wake = scheduler
            .table
            .next_fire()
            .unwrap_or_else(|| clock.now() + LOOK_AGAIN);
        // Waits for: a request (answered after the fires due by then, so a reply never
        // overtakes one), or the clock reaching the next fire. The system clock returns after
        // LOOK_AGAIN at most, so a clock that jumped is read again within a minute. Both arms
        // are cancel-safe: a mailbox's `recv` takes nothing until it returns.
        tokio::select! {
            request = scheduler.mailbox.recv() => {
                let now = clock.now();
                scheduler.pass(now).await;
                scheduler.answer(&request, now).await;
            }
            () = clock.wait(wake) => {}
        }
    }
}

struct Scheduler {
    broker: Arc<Broker>,
    me: ActorId,
    mailbox: Arc<Mailbox>,
    people: People,
    /// `private/scheduler/data/schedules.json`.
    path: PathBuf,
    table: Table,
}

impl Scheduler {
    /// Reads the schedules the last run left. An unreadable file is kept beside, under
    /// `schedules.json.unreadable`, and the scheduler starts empty (saying so), rather than
    /// overwrite it at the first change.
    fn open(broker: Arc<Broker>) -> Scheduler {
        let me = ActorId::parse(SCHEDULER).expect("a valid id");
        let mailbox = broker.native_mailbox(SCHEDULER);
        let world = broker.world.clone();
        if let Err(e) = world.create_actor_dirs(&me) {
            tracing::error!("{e:#}");
        }
        let path = schedules_path(&broker);
        let table = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                let aside = path.with_extension("json.unreadable");
                tracing::error!(
                    "{}: {e}; kept as {}, and no schedule runs until it is fixed and \
                     put back while the world is stopped",
                    path.display(),
                    aside.display()
                );
                if let Err(e) = std::fs::rename(&path, &aside) {
                    tracing::error!("{}: {e}", aside.display());
                }
                Table::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Table::default(),
            Err(e) => {
                tracing::error!("{}: {e}; no schedule runs", path.display());
                Table::default()
            }
        };
        Scheduler {
            people: People::new(&world),
            broker,
            me,
            mailbox,
            path,
            table,
        }
    }

    /// Ends the schedules whose actors or person are gone, then fires what is due at `now`.
    async fn pass(&mut self, now: DateTime<Utc>) {
        let mut changed = self.end_orphans().await;
        let due = self.table.due(now);
        let mut fires = Vec::new();
        for fire in due.fires {
            match self.speaker(&fire).await {
                Speaks::As(speaker) if speaker.tier >= Tier::Member => {
                    fires.push((fire, Some(speaker)));
                }
                Speaks::As(speaker) => {
                    self.note(&format!(
                        "schedule {} did not fire: {} is a guest now, and a guest may not \
                         schedule; it waits, and fires at its next time once {} is a member or \
                         an owner again (or an owner ends it with `unschedule`)",
                        fire.schedule, speaker.person, speaker.person
                    ));
                    self.table.unfired(&fire);
                }
                Speaks::Nobody(why) => {
                    self.note(&format!(
                        "schedule {} did not fire: {why}; it waits, and fires at its next time \
                         once its actor acts for a member or an owner",
                        fire.schedule
                    ));
                    self.table.unfired(&fire);
                }
                Speaks::Gone(reason) => {
                    self.note(&format!("schedule {} ended: {reason}", fire.schedule));
                    self.table.end(&fire.schedule);
                }
                Speaks::Unknown(reason) => {
                    self.note(&format!(
                        "schedule {} did not fire: {reason}",
                        fire.schedule
                    ));
                    self.table.unfired(&fire);
                }
            }
        }
        changed |= due.changed;
        if changed && let Err(e) = self.save().await {
            self.note(&format!(
                "{e}; the schedules' times may repeat after a restart"
            ));
        }
        for (fire, speaker) in fires {
            // `to` was checked to be an actor id when the schedule was made.
            let Ok(to) = ActorId::parse(&fire.to) else {
                continue;
            };
            let mut out = Outgoing::new(&to, &fire.body).spoken_by(speaker);
            out.schedule = Some(fire.schedule.into());
            self.broker.send(&self.me, out).await;
        }
    }

    /// Who a fire speaks for (DESIGN §18: the scheduler fires for the schedule's creator): for
    /// an actor's schedule, the actor's owner as the registry and `people.json` have them now
    /// (nobody when the actor acts for nobody); for a person's, the person as they are now.
    async fn speaker(&self, fire: &Fire) -> Speaks {
        if fire.creator.kind == CreatorKind::Actor {
            let Ok(actor) = ActorId::parse(&fire.creator.id) else {
                return Speaks::Nobody(format!("{} is not an actor's id", fire.creator.id));
            };
            return match self.broker.principal_of_actor(&actor).await {
                Principal::Person(speaker) => Speaks::As(speaker),
                Principal::Nobody(why) => Speaks::Nobody(why),
            };
        }
        let id = &fire.creator.id;
        match self.people.get(id) {
            Ok(Some(person)) => match ActorId::parse(&person.id) {
                Ok(person_id) => Speaks::As(Speaker {
                    person: person_id,
                    tier: person.tier,
                }),
                Err(e) => Speaks::Unknown(format!("people.json: {e}")),
            },
            Ok(None) => Speaks::Gone(format!("person {id} was removed")),
            Err(e) => Speaks::Unknown(format!("cannot read who person {id} is: {e:#}")),
        }
    }

    /// Ends every schedule whose recipient or creating actor is no longer in the world, or
    /// whose person was removed; true if any ended.
    async fn end_orphans(&mut self) -> bool {
        let known = self.known_actors().await;
        // When the people file cannot be read, nobody is taken for removed.
        let people: Option<BTreeSet<String>> = self
            .people
            .list()
            .ok()
            .map(|people| people.into_iter().map(|p| p.id).collect());
        let ended = self.table.end_where(|s| {
            if !known.contains(&s.to) {
                return Some(format!("its recipient, actor {}, was removed", s.to));
            }
            match s.creator.kind {
                CreatorKind::Actor if !known.contains(&s.creator.id) => {
                    Some(format!("its creator, actor {}, was removed", s.creator.id))
                }
                CreatorKind::Person
                    if people.as_ref().is_some_and(|p| !p.contains(&s.creator.id)) =>
                {
                    Some(format!("its creator, person {}, was removed", s.creator.id))
                }
                _ => None,
            }
        });
        for (id, reason) in &ended {
            self.note(&format!("schedule {id} ended: {reason}"));
        }
        !ended.is_empty()
    }

    /// Every actor of the world: the registry's and every native actor (which are never
    /// removed, even when one does not run, such as `web` with `--no-web`).
    async fn known_actors(&self) -> BTreeSet<String> {
        let mut known: BTreeSet<String> = self.broker.known_actors().await.into_keys().collect();
        known.extend(NATIVES.iter().map(|n| n.id.to_string()));
        known
    }

    /// Answers one request with one reply. Replies to the scheduler (an actor answering a
    /// fired message, an `undeliverable` notice) are not requests and get none, so two actors
    /// never trade errors.
    async fn answer(&mut self, request: &Envelope, now: DateTime<Utc>) {
        if request.reply_to.is_some() {
            return;
        }
        let body = request.body_value();
        let kind = body.get("type").and_then(Value::as_str).unwrap_or("");
        let principal = self.broker.principal(request).await;
        let asker = asker(request, &principal);
        let before = self.table.clone();
        let result = match kind {
            "schedule" => match may_schedule(&principal) {
                Ok(()) => match self.held(request, &principal, &body).await {
                    Some(held) => held,
                    None => {
                        let known = self.known_actors().await;
                        self.table.schedule(&asker, &body, now, &known)
                    }
                },
                Err(refusal) => Err(refusal),
            },
            "unschedule" => self.table.unschedule(&asker, &body),
            "schedules" => Ok(self.table.list(&asker)),
            "shutdown" => return,
            _ => Err(format!(
                "scheduler knows three requests: `schedule` (with one of `cron`, `every` or \
                 `at`, and `to` and `body`), `unschedule` (`id`) and `schedules`; for example \
                 {}",
                table::EXAMPLE
            )),
        };
        let result = match result {
            Ok(reply) if kind != "schedules" => match self.save().await {
                Ok(()) => Ok(reply),
                Err(e) => {
                    self.table = before;
                    Err(format!("{e}; nothing changed"))
                }
            },
            other => other,
        };
        let reply = result
            .unwrap_or_else(|reason| json!({"type": "error", "request": kind, "reason": reason}));
        let out = Outgoing::new(&request.from, &reply).replying_to(Some(&request.id));
        self.broker.send(&self.me, out).await;
    }

    /// The answer to a `schedule` a `"hold"` rule holds for a person's approval (DESIGN §25);
    /// `None` when it goes on now. Once approved it comes again, and is scheduled then.
    async fn held(
        &self,
        request: &Envelope,
        principal: &Principal,
        body: &Value,
    ) -> Option<Result<Value, String>> {
        let to = body["to"].as_str().unwrap_or("subscribers");
        let what = format!(
            "schedule `{}` to {to} ({})",
            body["body"]["type"].as_str().unwrap_or("a message"),
            when_words(body)
        );
        let actions = [(HeldAction::Schedule, what)];
        match self
            .broker
            .hold_for(&self.me, request, principal, &actions)
            .await
        {
            Ok(None) => None,
            Ok(Some(held)) => Some(Ok(held)),
            Err(e) => Some(Err(e)),
        }
    }

    /// Writes the table to `schedules.json`, atomically and synced (on the blocking pool, off
    /// the world's thread).
    async fn save(&self) -> Result<(), String> {
        // A table of strings, numbers and JSON values always serialises.
        let text = serde_json::to_vec_pretty(&self.table).expect("the table serialises");
        let (path, saved) = (self.path.clone(), text.clone());
        tokio::task::spawn_blocking(move || crate::fs::write_atomically(&path, &saved))
            .await
            .map_err(|e| format!("host bug: saving the schedules failed: {e}"))?
            .map_err(|e| format!("{}: cannot save the schedules: {e}", self.path.display()))?;
        if let Some(cluster) = &self.broker.cluster {
            cluster
                .shared
                .share_schedules(text)
                .await
                .map_err(|e| format!("cannot share the schedules with the other hosts: {e:#}"))?;
        }
        Ok(())
    }

    fn note(&self, note: &str) {
        self.broker.world.log_note(&self.me, note);
    }
}

/// Who a due schedule's message speaks for, decided at each fire.
enum Speaks {
    /// An actor's schedule whose actor acts for nobody, and why.
    Nobody(String),
    /// A person's, as they are now.
    As(Speaker),
    /// Its person was removed: the schedule ends instead of firing.
    Gone(String),
    /// The people file cannot be read: this time is missed, the schedule stays.
    Unknown(String),
}

/// Who asks: the person the request speaks for, else the actor that sent it, counted against
/// the person it acts for (`principal`). Owners and the terminal console see and may end every
/// schedule.
fn asker(request: &Envelope, principal: &Principal) -> Asker {
    let owner = principal.person().map(|p| p.person.to_string());
    match &request.speaker {
        Some(speaker) => Asker {
            creator: Creator {
                kind: CreatorKind::Person,
                id: speaker.person.to_string(),
            },
            all: speaker.tier == Tier::Owner,
            owner,
        },
        None => Asker {
            creator: Creator {
                kind: CreatorKind::Actor,
                id: request.from.to_string(),
            },
            all: request.from.as_str() == "console",
            owner,
        },
    }
}

/// Whether the principal may make a schedule (DESIGN §18): a schedule sends messages to actors
/// later, which a guest may not do now, and nobody may do at all.
fn may_schedule(principal: &Principal) -> Result<(), String> {
    match principal {
        Principal::Person(p) if p.tier >= Tier::Member => Ok(()),
        Principal::Person(p) => Err(format!(
            "{} is a guest in this world: guests cannot schedule messages; a member or an owner \
             can (an owner changes tiers with `sausage people tier {} member`)",
            p.person, p.person
        )),
        Principal::Nobody(why) => Err(format!("`schedule` refused: {why}")),
    }
}

/// When a `schedule` request fires, in words, for a person deciding whether it may.
fn when_words(body: &Value) -> String {
    if let Some(cron) = body["cron"].as_str() {
        return format!("cron {cron} {}", body["tz"].as_str().unwrap_or("UTC"));
    }
    if let Some(every) = body["every"].as_u64() {
        return format!("every {every} s");
    }
    format!("at {}", body["at"].as_str().unwrap_or("?"))
}
