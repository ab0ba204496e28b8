//! The scheduler (DESIGN §15) as actors see it: requests in, replies and fired messages out,
//! through a real broker. The boundary helper is [`Scheduled`]: a world with the scheduler on a
//! clock the test moves, a requester (`web`, speaking for a person or for nobody, who may only
//! read) and a recipient (`console`) whose mailboxes the test reads, so no test waits for real
//! minutes.
//! The last test runs `sausage run` and waits a few real seconds for an `at`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use support::*;

use sausage_core::broker::Broker;
use sausage_core::broker::mailbox::Mailbox;
use sausage_core::message::{ActorId, Envelope, Outgoing, Speaker, Tier};
use sausage_core::people::People;
use sausage_core::runtime::Runtime;
use sausage_core::schedules::clock::ManualClock;
use sausage_core::world::World;

fn t(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

/// A running broker with the scheduler on a [`ManualClock`]. `web` asks, `console` receives.
struct Scheduled {
    broker: Arc<Broker>,
    clock: ManualClock,
    scheduler: tokio::task::JoinHandle<()>,
    web: Arc<Mailbox>,
    console: Arc<Mailbox>,
    people: People,
}

impl Scheduled {
    async fn start(world: &TestWorld, now: &str) -> Scheduled {
        let world = World::new(&world.root);
        let people = People::new(&world);
        if people.get("ann").unwrap().is_none() {
            people.create("olga").unwrap();
            people.add("ann", Tier::Member, None).unwrap();
        }
        let broker = Broker::start(world, Runtime::new(None).unwrap())
            .await
            .unwrap();
        let clock = ManualClock::new(t(now));
        let scheduler = sausage_core::schedules::spawn_with(broker.clone(), clock.clone());
        Scheduled {
            web: broker.native_mailbox("web"),
            console: broker.native_mailbox("console"),
            broker,
            clock,
            scheduler,
            people,
        }
    }

    /// Stops the scheduler as a host's end would, and starts it again at `now`.
    async fn restart_at(&mut self, now: &str) {
        self.scheduler.abort();
        let _ = (&mut self.scheduler).await;
        self.clock.set(t(now));
        self.scheduler =
            sausage_core::schedules::spawn_with(self.broker.clone(), self.clock.clone());
    }

    /// Sends `body` to the scheduler from `web`, speaking for `person` (or nobody), and returns
    /// the reply's body.
    async fn ask(&self, person: Option<(&str, Tier)>, body: Value) -> Value {
        let speaker = person.map(|(id, tier)| Speaker {
            person: ActorId::parse(id).unwrap(),
            tier,
        });
        let web = ActorId::parse("web").unwrap();
        let scheduler = ActorId::parse("scheduler").unwrap();
        let id = self
            .broker
            .send(&web, Outgoing::new(&scheduler, &body).spoken_by(speaker))
            .await;
        let reply = next(&self.web).await;
        assert_eq!(reply.from.as_str(), "scheduler");
        assert_eq!(reply.reply_to.as_deref(), Some(id.as_str()));
        reply.body_value()
    }

    async fn ann(&self, body: Value) -> Value {
        self.ask(Some(("ann", Tier::Member)), body).await
    }

    async fn olga(&self, body: Value) -> Value {
        self.ask(Some(("olga", Tier::Owner)), body).await
    }

    /// Moves the clock, then makes sure the scheduler has done every pass that follows (a
    /// reply to `schedules` comes only after the fires due before it).
    async fn move_to(&self, now: &str) {
        self.clock.set(t(now));
        self.ask(None, json!({"type": "schedules"})).await;
    }

    /// Every message the console got so far.
    async fn received(&self) -> Vec<Arc<Envelope>> {
        let mut got = Vec::new();
        // A timeout polls its future once before it looks at the time: what waits is taken.
        while let Ok(message) = tokio::time::timeout(Duration::ZERO, self.console.recv()).await {
            got.push(message);
        }
        got
    }
}

async fn next(mailbox: &Mailbox) -> Arc<Envelope> {
    tokio::time::timeout(PATIENCE, mailbox.recv())
        .await
        .expect("a message within the patience")
}

fn in_world(test: impl AsyncFnOnce(&TestWorld)) {
    let world = TestWorld::new();
    sausage_core::scheduler().unwrap().block_on(test(&world));
}

#[test]
fn a_persons_schedule_fires_as_them_with_its_id_and_ends_when_they_go() {
    in_world(async |world| {
        let s = Scheduled::start(world, "2026-01-12T07:00:00Z").await;
        let reply = s
            .ann(
                json!({"type": "schedule", "cron": "0 9 * * *", "tz": "Europe/Berlin",
                "to": "console", "body": {"type": "text", "text": "summarise"}}),
            )
            .await;
        assert_eq!(reply["type"], "scheduled", "{reply}");
        assert_eq!(
            reply["next"], "2026-01-12T08:00:00Z",
            "9:00 in Berlin in winter"
        );
        assert!(reply["description"].as_str().is_some_and(|d| !d.is_empty()));

        s.move_to("2026-01-12T07:59:59Z").await;
        assert!(s.received().await.is_empty(), "not before its time");
        s.move_to("2026-01-12T08:00:00Z").await;
        let fired = s.received().await;
        assert_eq!(fired.len(), 1, "{fired:?}");
        assert_eq!(fired[0].from.as_str(), "scheduler");
        assert_eq!(
            fired[0].schedule.as_deref(),
            Some(reply["id"].as_str().unwrap())
        );
        let line = String::from_utf8(fired[0].to_line()).unwrap();
        assert!(line.contains(r#""schedule":"s1""#), "{line}");
        assert_eq!(
            fired[0].speaker,
            Some(Speaker {
                person: ActorId::parse("ann").unwrap(),
                tier: Tier::Member
            })
        );
        assert_eq!(
            fired[0].body_value(),
            json!({"type": "text", "text": "summarise"})
        );

        let listed = s.ann(json!({"type": "schedules"})).await;
        let one = &listed["schedules"][0];
        assert_eq!(one["creator"], "ann");
        assert_eq!(one["last"], "2026-01-12T08:00:00Z");
        assert_eq!(one["next"], "2026-01-13T08:00:00Z");
        assert_eq!(one["tz"], "Europe/Berlin");

        s.people.remove("ann").unwrap();
        s.move_to("2026-01-13T08:00:00Z").await;
        assert!(
            s.received().await.is_empty(),
            "a removed person's schedule does not fire"
        );
        let all = s
            .ask(Some(("olga", Tier::Owner)), json!({"type": "schedules"}))
            .await;
        assert_eq!(all["schedules"], json!([]));
        assert!(
            world.log("scheduler").contains("person ann, was removed"),
            "{}",
            world.log("scheduler")
        );
    });
}

/// A schedule fires for its creator only while they may schedule (DESIGN §15, §18): once ann is
/// a guest, neither her own schedule nor her actor's fires (each time is noted in the
/// scheduler's log, and `last` stays when it last fired); once she is a member again, both fire
/// as her again; once she is removed, hers ends and her actor's, which acts for nobody now,
/// stays unfired.
#[test]
fn a_schedule_stops_acting_for_its_creator_once_they_are_a_guest_or_gone() {
    in_world(async |world| {
        world.install("ann-bot", "echo");
        world.set_owner("ann-bot", "ann");
        let mut registry = world.json("sausage.json");
        registry["actors"]["ann-bot"]["running"] = json!(false);
        std::fs::write(world.path("sausage.json"), registry.to_string()).unwrap();
        let s = Scheduled::start(world, "2026-01-12T07:00:00Z").await;
        let every = |id: &str| {
            json!({"type": "schedule", "id": id, "every": 3600, "to": "console",
                "body": {"type": "text", "text": id}})
        };
        assert_eq!(s.ann(every("hers")).await["type"], "scheduled");
        // ann's actor asks for itself: its schedule fires for its owner, ann.
        let bot = ActorId::parse("ann-bot").unwrap();
        let scheduler = ActorId::parse("scheduler").unwrap();
        s.broker
            .send(&bot, Outgoing::new(&scheduler, &every("bots")))
            .await;
        let fired_as = |fired: &[Arc<Envelope>]| -> Vec<(String, Option<Tier>)> {
            let mut all: Vec<(String, Option<Tier>)> = fired
                .iter()
                .map(|m| {
                    (
                        m.body_value()["text"].as_str().unwrap().to_string(),
                        m.speaker.as_ref().map(|s| s.tier),
                    )
                })
                .collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all
        };
        let both_as = |tier| {
            vec![
                ("bots".to_string(), Some(tier)),
                ("hers".to_string(), Some(tier)),
            ]
        };
        // Answered in order: once this is, the actor's request was too, before the clock moves.
        let listed = s.olga(json!({"type": "schedules"})).await;
        let bots = &listed["schedules"][1];
        assert_eq!(
            (&bots["creator"], &bots["owner"]),
            (&json!("ann-bot"), &json!("ann")),
            "{listed}"
        );
        s.move_to("2026-01-12T08:00:00Z").await;
        assert_eq!(fired_as(&s.received().await), both_as(Tier::Member));

        s.people.set_tier("ann", Tier::Guest).unwrap();
        s.move_to("2026-01-12T09:00:00Z").await;
        assert_eq!(
            fired_as(&s.received().await),
            [],
            "no fire acts for a guest"
        );
        let log = world.log("scheduler");
        assert!(
            log.contains("schedule hers did not fire: ann is a guest now")
                && log.contains("schedule bots did not fire: ann is a guest now"),
            "{log}"
        );
        let listed = s.olga(json!({"type": "schedules"})).await;
        for one in listed["schedules"].as_array().unwrap() {
            assert_eq!(one["last"], "2026-01-12T08:00:00Z", "{one}");
            assert_eq!(one["next"], "2026-01-12T10:00:00Z", "{one}");
        }

        s.people.set_tier("ann", Tier::Member).unwrap();
        s.move_to("2026-01-12T10:00:00Z").await;
        assert_eq!(fired_as(&s.received().await), both_as(Tier::Member));

        s.people.remove("ann").unwrap();
        s.move_to("2026-01-12T11:00:00Z").await;
        assert_eq!(fired_as(&s.received().await), []);
        let log = world.log("scheduler");
        assert!(log.contains("schedule hers ended"), "{log}");
        assert!(
            log.contains("schedule bots did not fire: actor ann-bot acts for nobody"),
            "{log}"
        );
        let listed = s.olga(json!({"type": "schedules"})).await;
        let ids: Vec<&str> = listed["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|one| one["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["bots"]);
    });
}

#[test]
fn requests_are_refused_with_reasons_and_only_owners_see_everyones() {
    in_world(async |world| {
        let s = Scheduled::start(world, "2026-01-12T08:00:00Z").await;
        let refused = s
            .ann(json!({"type": "schedule", "every": 30, "to": "console", "body": {"type": "t"}}))
            .await;
        assert_eq!(refused["type"], "error");
        assert_eq!(refused["request"], "schedule");
        assert!(
            refused["reason"]
                .as_str()
                .unwrap()
                .contains("the shortest is 60 s"),
            "{refused}"
        );
        let refused = s
            .ann(json!({"type": "schedule", "every": 60, "to": "nobody", "body": {"type": "t"}}))
            .await;
        assert!(
            refused["reason"]
                .as_str()
                .unwrap()
                .contains("no actor `nobody`"),
            "{refused}"
        );
        let unknown = s.ann(json!({"type": "remind"})).await;
        assert_eq!(unknown["request"], "remind");
        assert!(
            unknown["reason"].as_str().unwrap().contains("`schedule`"),
            "{unknown}"
        );

        for _ in 0..20 {
            let ok = s.ann(json!({"type": "schedule", "every": 60, "to": "console", "body": {"type": "t"}})).await;
            assert_eq!(ok["type"], "scheduled", "{ok}");
        }
        let full = s
            .ann(json!({"type": "schedule", "every": 60, "to": "console", "body": {"type": "t"}}))
            .await;
        assert!(
            full["reason"]
                .as_str()
                .unwrap()
                .contains("the limit (20 per creator)"),
            "{full}"
        );
        // The actor `web` (speaking for nobody) is another creator, with none of ann's.
        let mine = s.ask(None, json!({"type": "schedules"})).await;
        let nobody = s
            .ask(
                None,
                json!({"type": "schedule", "every": 60, "to": "console", "body": {"type": "t"}}),
            )
            .await;
        assert!(
            nobody["reason"]
                .as_str()
                .unwrap()
                .contains("native actors have no power of their own"),
            "a request that acts for nobody may not schedule: {nobody}"
        );
        assert_eq!(mine["schedules"], json!([]));
        let by_web = s.ask(None, json!({"type": "unschedule", "id": "s1"})).await;
        assert!(
            by_web["reason"]
                .as_str()
                .unwrap()
                .contains("belongs to person ann"),
            "{by_web}"
        );
        let all = s
            .ask(Some(("olga", Tier::Owner)), json!({"type": "schedules"}))
            .await;
        assert_eq!(all["schedules"].as_array().unwrap().len(), 20);
        let ended = s
            .ask(
                Some(("olga", Tier::Owner)),
                json!({"type": "unschedule", "id": "s1"}),
            )
            .await;
        assert_eq!(ended, json!({"type": "unscheduled", "id": "s1"}));

        let saved = world.json("private/scheduler/data/schedules.json");
        assert_eq!(saved["schedules"].as_array().unwrap().len(), 19);
    });
}

#[test]
fn after_downtime_each_missed_schedule_fires_once() {
    in_world(async |world| {
        let mut s = Scheduled::start(world, "2026-01-12T10:00:00Z").await;
        for fields in [
            json!({"cron": "*/5 * * * *", "id": "often"}),
            json!({"every": 3600, "id": "hourly"}),
            json!({"at": "2026-01-12T11:00:00Z", "id": "once"}),
            json!({"at": "2026-01-12T10:30:00Z", "id": "long-ago"}),
        ] {
            let mut request =
                json!({"type": "schedule", "to": "console", "body": {"type": "ping"}});
            for (k, v) in fields.as_object().unwrap() {
                request[k] = v.clone();
            }
            assert_eq!(s.olga(request).await["type"], "scheduled");
        }
        // Down from 10:00 to 13:00: every schedule missed some times, and fires once.
        s.restart_at("2026-01-12T13:00:30Z").await;
        s.move_to("2026-01-12T13:00:30Z").await;
        let mut fired: Vec<String> = s
            .received()
            .await
            .iter()
            .map(|m| m.schedule.as_deref().unwrap().to_string())
            .collect();
        fired.sort();
        assert_eq!(fired, ["hourly", "long-ago", "often", "once"]);
        let left = s.olga(json!({"type": "schedules"})).await;
        let ids: Vec<&str> = left["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["often", "hourly"], "each `at` fired and ended");

        // Down for two days: still one fire each, and nothing more at the next pass.
        s.restart_at("2026-01-14T13:02:00Z").await;
        s.move_to("2026-01-14T13:02:00Z").await;
        assert_eq!(s.received().await.len(), 2);
        s.move_to("2026-01-14T13:03:00Z").await;
        assert!(s.received().await.is_empty(), "no burst");
    });
}

#[test]
fn a_removed_actors_schedules_end() {
    let world = TestWorld::new();
    world.install("notes", "notes");
    sausage_core::scheduler().unwrap().block_on(async {
        let s = Scheduled::start(&world, "2026-01-12T10:00:00Z").await;
        let to_notes = s
            .olga(
                json!({"type": "schedule", "every": 60, "to": "notes", "body": {"type": "count"}}),
            )
            .await;
        assert_eq!(to_notes["type"], "scheduled", "{to_notes}");
        let serving = tokio::spawn({
            let broker = s.broker.clone();
            async move { broker.serve().await }
        });
        let web = ActorId::parse("web").unwrap();
        s.broker
            .send(
                &web,
                Outgoing::new(
                    &ActorId::broker(),
                    &json!({"type": "remove", "actor": "notes"}),
                )
                .spoken_by(Some(Speaker {
                    person: ActorId::parse("olga").unwrap(),
                    tier: Tier::Owner,
                })),
            )
            .await;
        let removed = next(&s.web).await;
        assert_eq!(
            removed.body_value()["type"],
            "removed",
            "{:?}",
            removed.body_value()
        );
        s.move_to("2026-01-12T10:05:00Z").await;
        let left = s.olga(json!({"type": "schedules"})).await;
        assert_eq!(left["schedules"], json!([]));
        assert!(
            world
                .log("scheduler")
                .contains("its recipient, actor notes, was removed")
        );
        s.broker.shutdown().await;
        serving.abort();
    });
}

#[test]
fn an_at_a_few_seconds_ahead_fires_in_a_running_world() {
    let world = TestWorld::new();
    let mut host = world.run();
    let at = Utc::now() + TimeDelta::seconds(3);
    let at = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    host.tell(
        "scheduler",
        json!({"type": "schedule", "id": "tea", "at": at, "to": "console",
            "body": {"type": "text", "text": "tea is ready"}}),
    );
    let scheduled = host.wait_type("scheduler", "scheduled");
    assert_eq!(scheduled["id"], "tea");
    assert_eq!(scheduled["next"], at);
    assert!(
        world
            .read("private/scheduler/data/schedules.json")
            .contains("tea is ready")
    );
    let fired = host.wait_for_within(Duration::from_secs(15), "the schedule's text", |m| {
        m.from == "scheduler" && m.body["text"] == "tea is ready"
    });
    assert!(!fired.reply);
    host.tell("scheduler", json!({"type": "schedules"}));
    assert_eq!(
        host.wait_type("scheduler", "schedules")["schedules"],
        json!([])
    );
    assert!(host.quit().success());
}

#[test]
fn the_web_console_lists_schedules_for_owners_and_each_person_their_own() {
    use support::web::{Client, WebHost};
    let world = TestWorld::new();
    let web = WebHost::start(&world);
    let owner = web.log_in();
    let token = People::new(&World::new(&world.root))
        .add("ann", Tier::Member, None)
        .unwrap();
    let response =
        support::http::request(&web.addr, "GET", &format!("/login?token={token}"), &[], b"");
    assert_eq!(response.status, 303);
    let ann = Client {
        addr: web.addr.clone(),
        cookie: response
            .header("set-cookie")
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string(),
    };
    let schedule = |client: &Client, id: &str| {
        let body = json!({"type": "schedule", "id": id, "every": 3600, "to": "console",
            "body": {"type": "text", "text": format!("from {id}")}});
        let sent = client.post("/api/send", &json!({"to": "scheduler", "body": body}));
        assert_eq!(sent.status, 200, "{}", sent.text());
    };
    schedule(&owner, "mine");
    schedule(&ann, "anns");
    let all = owner.until("/api/schedules", "both schedules", |list| {
        list["schedules"].as_array().is_some_and(|s| s.len() == 2)
    });
    let creators: Vec<&str> = all["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["creator"].as_str().unwrap())
        .collect();
    assert_eq!(creators, ["owner", "ann"]);
    let own = ann.get("/api/schedules").json();
    assert_eq!(own["schedules"].as_array().unwrap().len(), 1);
    assert_eq!(own["schedules"][0]["id"], "anns");

    let refused = ann.post("/api/schedules/mine/unschedule", &json!({}));
    assert_eq!(refused.status, 400);
    assert!(
        refused.text().contains("only its creator or an owner"),
        "{}",
        refused.text()
    );
    let ended = owner.post("/api/schedules/anns/unschedule", &json!({}));
    assert_eq!(ended.status, 200, "{}", ended.text());
    assert_eq!(ended.json(), json!({"type": "unscheduled", "id": "anns"}));
    assert_eq!(ann.get("/api/schedules").json()["schedules"], json!([]));
    let page = owner.get("/app.js").text();
    assert!(
        page.contains("loadSchedules"),
        "the page has the Schedules view"
    );
    assert!(web.host.quit().success());
}

#[test]
fn an_owner_sees_and_ends_schedules_on_the_schedules_page() {
    use support::browser::Browser;
    use support::web::WebHost;
    let world = TestWorld::new();
    let web = WebHost::start(&world);
    let browser = Browser::open();
    browser.log_in(&web.login_link);
    let client = browser.client(&web.addr);
    let body = json!({"type": "schedule", "id": "morning", "cron": "0 9 * * *",
        "tz": "Europe/Berlin", "to": "console", "body": {"type": "text", "text": "<b>good morning</b>"}});
    let sent = client.post("/api/send", &json!({"to": "scheduler", "body": body}));
    assert_eq!(sent.status, 200, "{}", sent.text());
    client.until("/api/schedules", "the schedule", |list| {
        list["schedules"][0]["id"] == "morning"
    });

    browser.wait_shown("#nav a[data-view=schedules]");
    browser.click("#nav a[data-view=schedules]");
    browser.wait_shown("#view-schedules");
    let row = "#schedules-table tr[data-schedule=morning]";
    browser.wait_text(&format!("{row} .id"), "morning");
    let text = browser.text(row).unwrap();
    assert!(text.contains("cron 0 9 * * * (Europe/Berlin)"), "{text}");
    assert!(
        text.contains("<b>good morning</b>"),
        "the body is text, not markup: {text}"
    );
    browser.screenshot("schedules_view").unwrap();
    browser.click(&format!("{row} .remove"));
    browser.click("#confirm-yes");
    browser.wait_shown("#schedules-empty");
    assert_eq!(client.get("/api/schedules").json()["schedules"], json!([]));
    assert!(web.host.quit().success());
}

#[test]
fn the_agent_schedules_for_its_person_and_the_fired_text_starts_their_turn() {
    use sausage_fake_llm::{FakeLlm, openai};
    use support::agent::{final_reply, tool_outputs, world_with_agent};
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    // What `sausage init` grants the agent: it speaks for people by their ids.
    People::new(&World::new(&world.root))
        .grant_surface(
            &ActorId::parse("agent").unwrap(),
            sausage_core::people::PERSON_HANDLE,
        )
        .unwrap();
    let mut host = world.run();
    let at =
        (Utc::now() + TimeDelta::seconds(8)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let schedule = json!({"type": "schedule", "at": at, "to": "agent",
        "body": {"type": "text", "text": "say that it is tea time"}});
    fake.push_openai(openai::reply(vec![openai::function_call(
        "send_message",
        json!({"to": "scheduler", "body": schedule, "wait_seconds": 30}),
    )]));
    fake.push_openai(openai::text_reply("Scheduled."));
    fake.push_openai(openai::text_reply("It is tea time."));
    host.send("remind me in a few seconds that it is tea time");
    assert_eq!(final_reply(&mut host)["text"], "Scheduled.");
    let scheduled = &tool_outputs(&fake, 1)[0];
    assert!(scheduled.contains(r#""type":"scheduled""#), "{scheduled}");
    let saved = world.json("private/scheduler/data/schedules.json");
    assert_eq!(
        saved["schedules"][0]["creator"], "owner",
        "the person's, not the agent's"
    );
    assert_eq!(saved["schedules"][0]["creator_kind"], "person");

    // At its time the text reaches the agent as the owner's own, starts a turn in their
    // conversation, and the answer comes to where they read: this console.
    let answer = host.wait_for_within(
        Duration::from_secs(60),
        "the scheduled turn's answer",
        |m| m.from == "agent" && m.body["type"] == "text" && m.body["text"] == "It is tea time.",
    );
    assert_eq!(answer.body["for"], "owner");
    let third = fake.requests()[2].body.to_string();
    assert!(third.contains("say that it is tea time"), "{third}");
    assert!(
        third.contains("remind me in a few seconds"),
        "the owner's own conversation"
    );
    fake.assert_clean();
    assert!(host.quit().success());
}
