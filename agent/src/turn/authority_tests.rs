//! Tests of authority (DESIGN §18) through [`ScriptedHost`]: an actor's conversation acting for
//! the owner the broker names, requests that carry `"as"`, answers and replies taken only from
//! whom they were asked of, and the world's day cap.

use std::path::Path;

use serde_json::{Value, json};

use super::people_tests::{
    CONFIG, call, checkpointed, finals_text, from_person, replies_of, reply, run, says, text,
    tool_results, tool_sends, world,
};
use super::*;
use crate::testing::{Answer, ScriptedHost};

/// A text an actor (no person) sent the agent.
fn from_actor(id: &str, actor: &str, text: &str) -> Event {
    Event::Message(Incoming {
        id: id.into(),
        from: actor.into(),
        body: json!({"type": "text", "text": text}),
        ..Incoming::default()
    })
}

/// The broker's answer to the agent's first `principal` request about `echo`.
fn echo_acts_for(person: &str, tier: &str) -> Event {
    reply(
        "m-p",
        "broker",
        "agent/actor.echo.p1",
        json!({"type": "principal", "actor": "echo", "person": person, "tier": tier}),
    )
}

/// [`CONFIG`] with a price (USD 1 per million tokens of each kind) and `extra`.
fn priced(extra: Value) -> String {
    let mut config: Value = serde_json::from_str(CONFIG).unwrap();
    config["prices"] = json!({"m": {"input": 1.0, "output": 1.0}});
    for (key, value) in extra.as_object().unwrap() {
        config[key] = value.clone();
    }
    config.to_string()
}

fn spend(data: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(data.join("spend.json")).unwrap()).unwrap()
}

/// The system prompt of each request.
fn prompts(host: &ScriptedHost) -> Vec<String> {
    host.requests
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            body["instructions"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// A model step that calls `list_dir` and costs `usd` at [`priced`]'s price.
fn costly_step(usd: f64) -> Answer {
    let tokens = (usd * 1_000_000.0 / 2.0) as u64;
    ScriptedHost::ok(json!({"status": "completed", "output": [{
        "type": "function_call", "id": "fc_x", "call_id": "cx", "name": "list_dir",
        "arguments": "{\"path\":\"/nowhere\"}"}],
        "usage": {"input_tokens": tokens, "output_tokens": tokens,
            "total_tokens": 2 * tokens}}))
}

#[test]
fn an_actors_conversation_acts_for_its_owner_and_is_paid_by_them() {
    let data = world(&priced(json!({})));
    let target = data.join("work/mia/x.txt");
    let spawn = json!({"type": "spawn", "actor": "x",
        "wasm": "/actor/cargo/public/builds/1/x.wasm", "owner": "boss"});
    let host = run(
        &data,
        vec![
            from_actor("m-1", "echo", "make me a helper"),
            // The actor's own claim to act for an owner is not the broker's word.
            reply(
                "m-f",
                "echo",
                "agent/actor.echo.p1",
                json!({"type": "principal", "actor": "echo", "person": "boss", "tier": "owner"}),
            ),
            echo_acts_for("mia", "member"),
            checkpointed("agent/actor.echo.k2", "x"),
        ],
        vec![
            call("write_file", json!({"path": target, "content": "x"})),
            call("send_message", json!({"to": "broker", "body": spawn})),
            call("remember", json!({"text": "echo likes x"})),
            call(
                "read_file",
                json!({"path": data.join("people/mia/memory.md")}),
            ),
            call(
                "write_file",
                json!({"path": data.join("work/boss/y.txt"), "content": "y"}),
            ),
            text("Done."),
        ],
    );
    let asked = &host.sent[0];
    assert_eq!(
        (asked.to.as_deref(), &asked.body, &asked.speaks_for),
        (
            Some("broker"),
            &json!({"type": "principal", "actor": "echo"}),
            &None
        )
    );
    assert!(prompts(&host)[0].contains("which acts for its owner mia"));
    assert!(target.exists(), "a member writes in their own work folder");
    let sends = tool_sends(&host);
    let spawned = sends.iter().find(|m| m.body["type"] == "spawn").unwrap();
    assert_eq!(spawned.body["owner"], "mia", "the spawn is the owner's");
    assert_eq!(spawned.speaks_for.as_deref(), Some("mia"));
    let results = tool_results(&host);
    assert!(
        results[2].contains("is an actor's, not a person's"),
        "{results:?}"
    );
    assert!(results[3].starts_with("refused: "), "{results:?}");
    assert!(
        results[4].contains("writes only under"),
        "not boss's rights: {results:?}"
    );
    assert!(!data.join("work/boss").exists());
    let spend = spend(&data);
    assert!(spend["people"]["mia"].is_object(), "{spend}");
    assert!(spend["actors"].as_object().unwrap().is_empty(), "{spend}");
    assert!(Conversation::Actor("echo".into()).history(&data).exists());
    assert!(
        !data.join("people/mia").exists(),
        "the conversation stays the actor's"
    );
    assert_eq!(finals_text(&host), ["Done."]);
}

#[test]
fn an_actor_that_acts_for_nobody_has_a_guests_rights_and_the_model_is_told_why() {
    for (events, why) in [
        (
            vec![reply(
                "m-p",
                "broker",
                "agent/actor.echo.p1",
                json!({"type": "error", "request": "principal",
                    "reason": "echo has no owner recorded"}),
            )],
            "acts for nobody: echo has no owner recorded",
        ),
        (vec![], "did not say within 10 s"),
    ] {
        let data = world(&priced(json!({})));
        let mut all = vec![from_actor("m-1", "echo", "hello")];
        all.extend(events);
        let host = run(
            &data,
            all,
            vec![
                call(
                    "send_message",
                    json!({"to": "echo", "body": {"type": "hi"}}),
                ),
                text("Hello."),
            ],
        );
        let request = String::from_utf8(host.requests[0].body.clone()).unwrap();
        assert!(request.contains(why), "{request}");
        assert!(prompts(&host)[0].contains("which acts for nobody"));
        let results = tool_results(&host);
        assert!(results[0].contains("messages to actors"), "{results:?}");
        assert_eq!(tool_sends(&host).len(), 1, "only the principal request");
        assert!(spend(&data)["actors"]["echo"].is_object());
    }
}

#[test]
fn a_resumed_actors_turn_keeps_the_owner_the_broker_named() {
    let message = Incoming {
        id: "m-1".into(),
        from: "echo".into(),
        body: json!({"type": "text", "text": "hi"}),
        ..Incoming::default()
    };
    let mut turn = SavedTurn::new(message, Conversation::Actor("echo".into()));
    assert_eq!(
        (turn.who().person, turn.who().tier, turn.payer()),
        (None, Tier::Guest, Payer::Actor("echo".into()))
    );
    turn.principal = Some(Principal::Person {
        person: "ann".into(),
        tier: "owner".into(),
    });
    let saved: SavedTurn = serde_json::from_str(&serde_json::to_string(&turn).unwrap()).unwrap();
    let who = saved.who();
    assert_eq!(
        (who.person.as_deref(), who.tier, saved.payer()),
        (Some("ann"), Tier::Owner, Payer::Person("ann".into()))
    );
}

#[test]
fn an_actors_turn_counts_against_its_owners_day() {
    let data = world(&priced(json!({})));
    let spent = json!({"day": "2026-12-01", "usd": 10.0, "people": {"mia": {"usd": 10.0}}});
    std::fs::write(data.join("spend.json"), spent.to_string()).unwrap();
    let host = ScriptedHost {
        events: vec![
            from_actor("m-1", "echo", "hi"),
            echo_acts_for("mia", "member"),
        ]
        .into(),
        clock: Some(std::time::UNIX_EPOCH + Duration::from_secs(1_796_083_200 + 3600)),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let host = agent.host;
    assert!(host.requests.is_empty());
    let words = &finals_text(&host)[0];
    assert!(
        words.contains("mia's model spending today is $10.00")
            && words.contains("daily cap of a member"),
        "{words}"
    );
}

#[test]
fn the_worlds_day_cap_bounds_all_turns_whoever_pays() {
    let data = world(&priced(json!({"max_world_day_usd": 3.0})));
    let now = std::time::UNIX_EPOCH + Duration::from_secs(1_796_083_200 + 3600);
    let spent = json!({"day": "2026-12-01", "usd": 2.9,
        "people": {"ann": {"usd": 1.0}, "mia": {"usd": 1.9}}});
    std::fs::write(data.join("spend.json"), spent.to_string()).unwrap();
    let host = ScriptedHost {
        events: vec![
            says("m-1", "zoe", "member", "work"),
            says("m-2", "ann", "member", "and me"),
        ]
        .into(),
        answers: vec![costly_step(0.2), costly_step(0.2)].into(),
        clock: Some(now),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let host = agent.host;
    assert_eq!(
        host.requests.len(),
        1,
        "zoe's turn stops at the world's cap"
    );
    let finals: Vec<&Outgoing> = replies_of(&host, "text");
    assert_eq!(finals[0].body["stopped"], "budget");
    for words in finals.iter().map(|m| m.body["text"].as_str().unwrap()) {
        assert!(
            words.contains("the world's model spending today is $3.10")
                && words.contains("max_world_day_usd")
                && words.contains("in 23 h 00 min"),
            "{words}"
        );
    }
    assert_eq!(
        finals[1].body["for"], "ann",
        "ann's turn is refused without a step"
    );
}

#[test]
fn an_answer_naming_no_open_question_of_its_sender_is_refused_and_changes_nothing() {
    let data = world(CONFIG);
    let answer = |id: &str, person: &str, reply_to: Option<&str>| {
        let mut message = super::people_tests::from_person(
            id,
            person,
            "member",
            "web",
            json!({"type": "answer", "text": "yes"}),
        );
        message.reply_to = reply_to.map(str::to_string);
        Event::Message(message)
    };
    let host = run(
        &data,
        vec![
            answer("m-1", "ann", Some("agent/person.ann.q9")),
            answer("m-2", "ann", None),
        ],
        vec![],
    );
    let refusals = replies_of(&host, "error");
    assert_eq!(refusals.len(), 2);
    for refusal in &refusals {
        assert_eq!(
            (&refusal.body["request"], &refusal.body["for"]),
            (&json!("answer"), &json!("ann"))
        );
    }
    let reason = refusals[0].body["reason"].as_str().unwrap();
    assert!(
        reason.contains("agent/person.ann.q9 is no open question of yours"),
        "{reason}"
    );
    assert!(
        refusals[1].body["reason"]
            .as_str()
            .unwrap()
            .contains("names none")
    );
    assert!(host.requests.is_empty());
    let files: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files, ["config.json"], "nothing was written");
}

#[test]
fn another_persons_answer_to_a_question_is_refused_and_the_askers_is_taken() {
    let data = world(CONFIG);
    let answer = |id: &str, person: &str| {
        let mut message = super::people_tests::from_person(
            id,
            person,
            "owner",
            "web",
            json!({"type": "answer", "text": format!("{person} says red")}),
        );
        message.reply_to = Some("agent/person.ann.q1".into());
        Event::Message(message)
    };
    let host = run(
        &data,
        vec![
            says("m-1", "ann", "member", "pick a colour with me"),
            answer("m-2", "bob"),
            answer("m-3", "ann"),
        ],
        vec![
            call("ask", json!({"question": "Which colour?"})),
            text("Red."),
        ],
    );
    let [refusal] = &replies_of(&host, "error")[..] else {
        panic!("one refusal: {:?}", host.sent);
    };
    assert_eq!(refusal.reply_to.as_deref(), Some("m-2"));
    assert_eq!(refusal.body["for"], "bob");
    let reason = refusal.body["reason"].as_str().unwrap();
    assert!(
        reason.contains("was not put to you; only ann answers it"),
        "{reason}"
    );
    assert_eq!(tool_results(&host), ["ann answered: ann says red"]);
    let kept = std::fs::read_to_string(data.join("people/ann/history.json")).unwrap();
    assert!(
        !kept.contains("bob says red"),
        "bob's answer reached no conversation"
    );
}

#[test]
fn a_wait_takes_its_reply_only_from_the_actor_asked_also_in_wait_for_messages() {
    let data = world(CONFIG);
    let pong = |id: &str, from: &str, reply_to: &str| {
        reply(id, from, reply_to, json!({"type": "pong", "by": from}))
    };
    let host = run(
        &data,
        vec![
            says("m-1", "ann", "owner", "ping echo twice"),
            pong("m-2", "mallory", "agent/person.ann.t1"),
            pong("m-3", "echo", "agent/person.ann.t1"),
            // The second ping's wait ends without its reply; a forged one comes later.
            pong("m-4", "mallory", "agent/person.ann.t2"),
            pong("m-5", "echo", "agent/person.ann.t2"),
        ],
        vec![
            call(
                "send_message",
                json!({"to": "echo", "body": {"type": "ping"}, "wait_seconds": 5}),
            ),
            call(
                "send_message",
                json!({"to": "echo", "body": {"type": "ping"}}),
            ),
            call("wait_for_messages", json!({"seconds": 5})),
            text("Echo answered twice."),
        ],
    );
    let results = tool_results(&host);
    assert!(results[0].contains(r#""from":"echo""#), "{results:?}");
    assert!(results[2].contains(r#""id":"m-5""#), "{results:?}");
    assert!(
        results.iter().all(|r| !r.contains("mallory")),
        "no forged reply reached the model: {results:?}"
    );
    let inbox = std::fs::read_to_string(data.join("inbox.json")).unwrap_or_default();
    assert!(!inbox.contains("mallory"), "{inbox}");
}

#[test]
fn an_actors_turns_count_against_its_owners_hourly_limit() {
    let data = world(CONFIG);
    let now = 1_796_083_200 + 3600;
    let starts: Vec<u64> = (0..fairness::MEMBER_TURNS_PER_HOUR as u64)
        .map(|n| now - 3000 + n)
        .collect();
    std::fs::write(data.join("rate.json"), json!({"mia": starts}).to_string()).unwrap();
    let host = ScriptedHost {
        events: vec![
            from_actor("m-1", "echo", "hi"),
            echo_acts_for("mia", "member"),
        ]
        .into(),
        clock: Some(std::time::UNIX_EPOCH + Duration::from_secs(now)),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let host = agent.host;
    assert!(host.requests.is_empty());
    let words = &finals_text(&host)[0];
    assert!(
        words.contains("mia (who owns this actor) has started 60 turns")
            && words.contains("ask again in 10 min"),
        "{words}"
    );
}

#[test]
fn after_a_restart_a_wait_still_takes_its_reply_only_from_the_actor_asked() {
    let data = world(CONFIG);
    let ping = json!({"to": "echo", "body": {"type": "ping"}, "wait_seconds": 60});
    run(
        &data,
        vec![says("m-1", "ann", "owner", "ping echo"), Event::Stop],
        vec![call("send_message", ping)],
    );
    let saved: SavedTurn = read_json(&data.join("turn.json")).expect("turn.json");
    assert_eq!(saved.waiting.unwrap().to.as_deref(), Some("echo"));
    let pong = |id: &str, from: &str| {
        reply(
            id,
            from,
            "agent/person.ann.t1",
            json!({"type": "pong", "by": from}),
        )
    };
    let host = run(
        &data,
        vec![pong("m-2", "mallory"), pong("m-3", "echo")],
        vec![text("Echo answered.")],
    );
    let [result] = &tool_results(&host)[..] else {
        panic!("one result: {:?}", tool_results(&host));
    };
    assert!(
        result.contains(r#""from":"echo""#) && !result.contains("mallory"),
        "{result}"
    );
}

/// A request to the agent itself (`goal`, `room`) from an actor waits for the broker to name
/// the actor's owner, then acts with the owner's tier: a member's actor starts a goal whose
/// round has the member's rights, an owner's actor makes a room, a guest's actor is refused as
/// the guest would be, and only the broker's word counts.
#[test]
fn an_actors_requests_to_the_agent_act_with_its_owners_tier() {
    let data = world(CONFIG);
    let request = |id: &str, actor: &str, body: Value| {
        Event::Message(Incoming {
            id: id.into(),
            from: actor.into(),
            body,
            ..Incoming::default()
        })
    };
    let acts_for = |reply_to: &str, actor: &str, person: &str, tier: &str| {
        reply(
            "m-p",
            "broker",
            reply_to,
            json!({"type": "principal", "actor": actor, "person": person, "tier": tier}),
        )
    };
    let host = run(
        &data,
        vec![
            request(
                "m-1",
                "echo",
                json!({"type": "goal", "text": "tidy up", "max_rounds": 1}),
            ),
            request("m-2", "gus-bot", json!({"type": "goal", "text": "x"})),
            request(
                "m-3",
                "olga-bot",
                json!({"type": "room", "room": "team", "members": ["olga", "mia"]}),
            ),
            acts_for("agent/owner.m-2", "gus-bot", "gus", "guest"),
            // An actor's own claim about whom another acts for is not the broker's word.
            reply(
                "m-f",
                "echo",
                "agent/owner.m-3",
                json!({"type": "principal", "actor": "olga-bot", "person": "gus", "tier": "guest"}),
            ),
            acts_for("agent/owner.m-1", "echo", "mia", "member"),
            acts_for("agent/owner.m-3", "olga-bot", "olga", "owner"),
            // The goal's round asks again whom echo acts for, then runs with mia's rights.
            Event::TimedOut,
            acts_for("agent/actor.echo.p1", "echo", "mia", "member"),
        ],
        vec![call(
            "goal_status",
            json!({"status": "done", "summary": "tidied"}),
        )],
    );
    let asked: Vec<(Option<&str>, &Value)> = host
        .sent
        .iter()
        .filter(|m| m.body["type"] == "principal")
        .map(|m| (m.id.as_deref(), &m.body))
        .collect();
    assert_eq!(
        asked,
        [
            (
                Some("owner.m-1"),
                &json!({"type": "principal", "actor": "echo"})
            ),
            (
                Some("owner.m-2"),
                &json!({"type": "principal", "actor": "gus-bot"})
            ),
            (
                Some("owner.m-3"),
                &json!({"type": "principal", "actor": "olga-bot"})
            ),
            (
                Some("actor.echo.p1"),
                &json!({"type": "principal", "actor": "echo"})
            ),
        ]
    );
    let to = |id: &str| {
        host.sent
            .iter()
            .find(|m| m.reply_to.as_deref() == Some(id))
            .unwrap_or_else(|| panic!("no answer to {id}"))
    };
    let refused = &to("m-2").body;
    assert_eq!(refused["type"], "error", "{refused}");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .contains("actor gus-bot acts for gus, a guest, and guests may not start goals"),
        "{refused}"
    );
    assert_eq!(to("m-3").body["type"], "room_created", "{}", to("m-3").body);
    assert!(data.join("rooms/team/room.json").exists());
    assert_eq!(to("m-1").to.as_deref(), Some("echo"));
    assert_eq!(to("m-1").body["type"], "goal_started");
    assert!(
        prompts(&host)[0].contains("which acts for its owner mia"),
        "{}",
        prompts(&host)[0]
    );
    let done = replies_of(&host, "goal_done");
    assert_eq!(done.len(), 1, "{:?}", host.sent);
    assert_eq!(done[0].to.as_deref(), Some("echo"));
    let inbox: Value =
        serde_json::from_slice(&std::fs::read(data.join("inbox.json")).unwrap()).unwrap();
    assert!(
        inbox.get("owners_asked").is_none(),
        "nothing waits: {inbox}"
    );
}

/// A goal an actor started works for its owner as they are at each round: once the owner is a
/// guest, the next round does not run and the goal ends saying why.
#[test]
fn an_actors_goal_ends_when_its_owner_is_a_guest_at_a_round() {
    let data = world(CONFIG);
    let host = run(
        &data,
        vec![
            Event::Message(Incoming {
                id: "m-1".into(),
                from: "echo".into(),
                body: json!({"type": "goal", "text": "tidy up"}),
                ..Incoming::default()
            }),
            reply(
                "m-p",
                "broker",
                "agent/owner.m-1",
                json!({"type": "principal", "actor": "echo", "person": "mia", "tier": "member"}),
            ),
            Event::TimedOut,
            reply(
                "m-q",
                "broker",
                "agent/actor.echo.p1",
                json!({"type": "principal", "actor": "echo", "person": "mia", "tier": "guest"}),
            ),
        ],
        vec![],
    );
    assert!(host.requests.is_empty(), "no round ran");
    let stopped = replies_of(&host, "goal_stopped");
    assert_eq!(stopped.len(), 1, "{:?}", host.sent);
    assert!(
        stopped[0].body["reason"]
            .as_str()
            .unwrap()
            .contains("actor echo acts for mia, who is a guest now"),
        "{}",
        stopped[0].body
    );
}

/// A member's actor may stop its member's goal (as she may), and not another person's.
#[test]
fn an_actor_stops_the_goals_its_owner_may_stop_and_no_other() {
    let data = world(CONFIG);
    let from_actor = |id: &str, body: Value| {
        Event::Message(Incoming {
            id: id.into(),
            from: "mia-bot".into(),
            body,
            ..Incoming::default()
        })
    };
    let acts_for_mia = |request: &str| {
        reply(
            "m-p",
            "broker",
            &format!("agent/owner.{request}"),
            json!({"type": "principal", "actor": "mia-bot", "person": "mia", "tier": "member"}),
        )
    };
    let goal = |id: &str, person: &str| {
        let body = json!({"type": "goal", "text": "tidy up", "max_rounds": 1});
        Event::Message(from_person(id, person, "member", "web", body))
    };
    let events = vec![
        goal("m-1", "bob"),
        goal("m-2", "mia"),
        from_actor("m-3", json!({"type": "goal_stop", "goal": "g1"})),
        acts_for_mia("m-3"),
        from_actor("m-4", json!({"type": "goal_stop", "goal": "g2"})),
        acts_for_mia("m-4"),
    ];
    let host = run(&data, events, vec![]);
    let answer = |id: &str| {
        host.sent
            .iter()
            .find(|m| m.reply_to.as_deref() == Some(id) && m.to.as_deref() == Some("mia-bot"))
            .unwrap_or_else(|| panic!("no answer to {id}: {:?}", host.sent))
            .body
            .clone()
    };
    let refused = answer("m-3");
    assert!(
        refused["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("goal g1 is not yours"),
        "{refused}"
    );
    assert_eq!(answer("m-4")["type"], "goal_stopped", "{}", answer("m-4"));
    let goals = crate::goals::Goals::new(&data);
    assert_eq!(goals.get("g1").unwrap().stop, None, "bob's goal goes on");
}
