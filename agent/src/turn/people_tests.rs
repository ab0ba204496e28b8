//! Tests of people (DESIGN §13) through [`ScriptedHost`]: people's messages and canned provider
//! answers in; the requests made for each person, the messages sent for each, and the files
//! written, out.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::testing::{Answer, ScriptedHost, temp_dir};

pub(super) const CONFIG: &str =
    r#"{"api":"openai-responses","base_url":"http://model.test","model":"m","token":"t"}"#;

pub(super) fn world(config: &str) -> PathBuf {
    let dir = temp_dir("people");
    std::fs::write(dir.join("config.json"), config).unwrap();
    dir
}

pub(super) fn run(data: &Path, events: Vec<Event>, answers: Vec<Answer>) -> ScriptedHost {
    let host = ScriptedHost {
        events: events.into(),
        answers: answers.into(),
        ..ScriptedHost::default()
    };
    run_with(data, host)
}

/// Runs the agent on `data` with this scripted host until its script ends.
pub(super) fn run_with(data: &Path, host: ScriptedHost) -> ScriptedHost {
    let mut agent = Agent::new(host, data, "agent", "2", false);
    agent.run();
    agent.host
}

/// A message a person sent through surface `from`, as the host delivers it.
pub(super) fn from_person(id: &str, person: &str, tier: &str, from: &str, body: Value) -> Incoming {
    Incoming {
        id: id.into(),
        from: from.into(),
        person: Some(person.into()),
        tier: Some(tier.into()),
        body,
        ..Incoming::default()
    }
}

/// A text a person typed on the web page.
pub(super) fn says(id: &str, person: &str, tier: &str, text: &str) -> Event {
    let body = json!({"type": "text", "text": text});
    Event::Message(from_person(id, person, tier, "web", body))
}

/// A reply from an actor (no person) to one of the agent's messages.
pub(super) fn reply(id: &str, from: &str, reply_to: &str, body: Value) -> Event {
    Event::Message(Incoming {
        id: id.into(),
        from: from.into(),
        reply_to: Some(reply_to.into()),
        body,
        ..Incoming::default()
    })
}

/// The broker's answer to the checkpoint a turn asks before it first changes `actor` (DESIGN
/// §21), replying to the agent's message `reply_to`.
pub(super) fn checkpointed(reply_to: &str, actor: &str) -> Event {
    reply(
        "m-k",
        "broker",
        reply_to,
        json!({"type": "checkpointed", "turn": "t", "actor": actor, "existed": true}),
    )
}

pub(super) fn call(name: &str, arguments: Value) -> Answer {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ScriptedHost::ok(json!({"status": "completed", "output": [{
        "type": "function_call", "id": format!("fc_{n}"), "call_id": format!("c{n}"),
        "name": name, "arguments": arguments.to_string(),
    }]}))
}

pub(super) fn text(text: &str) -> Answer {
    ScriptedHost::ok(json!({"status": "completed", "output": [{
        "type": "message", "id": "msg_1", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }]}))
}

/// Each request as text, with the person its system prompt says it acts for.
pub(super) fn requests(host: &ScriptedHost) -> Vec<(String, String)> {
    host.requests
        .iter()
        .map(|r| {
            let body = String::from_utf8(r.body.clone()).unwrap();
            let value: Value = serde_json::from_str(&body).unwrap();
            let prompt = value["instructions"].as_str().unwrap_or_default();
            let person = prompt
                .split("This turn acts for ")
                .nth(1)
                .or_else(|| prompt.split(" spoke, and").next()?.rsplit("; ").next())
                .and_then(|rest| rest.split([',', ' ']).next())
                .unwrap_or("?")
                .to_string();
            (person, body)
        })
        .collect()
}

/// The final answers: (to, for, reply_to, text) of each.
pub(super) fn finals(host: &ScriptedHost) -> Vec<(String, String, Option<String>, String)> {
    host.sent
        .iter()
        .filter(|m| m.body["type"] == "text")
        .map(|m| {
            (
                m.to.clone().unwrap_or_default(),
                m.body["for"].as_str().unwrap_or_default().to_string(),
                m.reply_to.clone(),
                m.body["text"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The result the model got for each tool call, in order (each request repeats the earlier
/// ones of its conversation; a call counts once).
pub(super) fn tool_results(host: &ScriptedHost) -> Vec<String> {
    let mut seen: Vec<(String, String)> = Vec::new();
    for request in &host.requests {
        let value: Value = serde_json::from_slice(&request.body).unwrap();
        for item in value["input"].as_array().into_iter().flatten() {
            let call = item["call_id"].as_str().unwrap_or_default().to_string();
            if item["type"] == "function_call_output" && !seen.iter().any(|(c, _)| *c == call) {
                seen.push((call, item["output"].as_str().unwrap().to_string()));
            }
        }
    }
    seen.into_iter().map(|(_, output)| output).collect()
}

/// What the agent's `send_message` calls sent (they carry their own ids).
pub(super) fn tool_sends(host: &ScriptedHost) -> Vec<&Outgoing> {
    host.sent.iter().filter(|m| m.id.is_some()).collect()
}

pub(super) fn replies_of<'a>(host: &'a ScriptedHost, kind: &str) -> Vec<&'a Outgoing> {
    host.sent
        .iter()
        .filter(|m| m.body["type"] == kind)
        .collect()
}

#[test]
fn two_people_never_see_each_others_messages_tool_results_or_memory() {
    let data = world(CONFIG);
    let bobs_file = data.join("work/bob/plans.txt");
    std::fs::create_dir_all(bobs_file.parent().unwrap()).unwrap();
    std::fs::write(&bobs_file, "bob plans a surprise-party").unwrap();
    let host = run(
        &data,
        vec![
            says(
                "m-1",
                "ann",
                "member",
                "my secret word is marmalade; remember it",
            ),
            says("m-2", "bob", "member", "what is in my plans file?"),
            says("m-3", "ann", "member", "what is my word?"),
            says("m-4", "bob", "member", "what did ann tell you?"),
        ],
        vec![
            call("remember", json!({"text": "her secret word is marmalade"})),
            text("Remembered."),
            call("read_file", json!({"path": bobs_file})),
            text("A party."),
            text("It is marmalade."),
            text("I cannot tell you what others said."),
        ],
    );
    let requests = requests(&host);
    let people: Vec<&str> = requests.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(people, ["ann", "ann", "bob", "bob", "ann", "bob"]);
    for (person, body) in &requests {
        if person == "bob" {
            assert!(!body.contains("marmalade"), "bob's request: {body}");
        } else {
            assert!(!body.contains("surprise-party"), "ann's request: {body}");
            assert!(!body.contains("plans file"), "ann's request: {body}");
        }
    }
    // Ann's own later request does carry her memory: the check above can fail.
    assert!(requests[4].1.contains("her secret word is marmalade"));
    let answered: Vec<(String, Option<String>)> = finals(&host)
        .into_iter()
        .map(|(_, person, reply_to, _)| (person, reply_to))
        .collect();
    let expected = [
        ("ann", "m-1"),
        ("bob", "m-2"),
        ("ann", "m-3"),
        ("bob", "m-4"),
    ];
    assert_eq!(
        answered,
        expected.map(|(p, m)| (p.to_string(), Some(m.to_string())))
    );
    // Every message about a turn says whom it is for.
    for message in host.sent.iter().filter(|m| m.body.get("turn").is_some()) {
        let person = if ["m-1", "m-3"].contains(&message.body["turn"].as_str().unwrap()) {
            "ann"
        } else {
            "bob"
        };
        assert_eq!(message.body["for"], person, "{message:?}");
    }
    let anns = Conversation::Person("ann".into()).history(&data);
    let bobs = Conversation::Person("bob".into()).history(&data);
    assert!(!std::fs::read_to_string(bobs).unwrap().contains("marmalade"));
    assert!(std::fs::read_to_string(anns).unwrap().contains("marmalade"));
}

#[test]
fn a_conversation_request_answers_the_askers_own_history() {
    let data = world(CONFIG);
    let host = run(
        &data,
        vec![
            says("m-1", "ann", "member", "ann's question"),
            says("m-2", "bob", "member", "bob's question"),
            Event::Message(from_person(
                "m-3",
                "bob",
                "member",
                "web",
                json!({"type": "conversation"}),
            )),
        ],
        vec![text("for ann"), text("for bob")],
    );
    let [told] = &replies_of(&host, "conversation")[..] else {
        panic!("one conversation answer: {:?}", host.sent);
    };
    assert_eq!(told.body["for"], "bob");
    let entries = told.body["entries"].to_string();
    assert!(entries.contains("bob's question") && entries.contains("for bob"));
    assert!(!entries.contains("ann"), "{entries}");
}

#[test]
fn a_guest_may_not_write_nor_ask_the_broker_to_spawn_and_nothing_happens() {
    let data = world(CONFIG);
    let target = data.join("work/gus/x.txt");
    let spawn =
        json!({"type": "spawn", "actor": "x", "wasm": "/actor/cargo/public/builds/1/x.wasm"});
    let host = run(
        &data,
        vec![says(
            "m-1",
            "gus",
            "guest",
            "write a file and spawn an actor",
        )],
        vec![
            call("write_file", json!({"path": target, "content": "x"})),
            call("send_message", json!({"to": "broker", "body": spawn})),
            call(
                "send_message",
                json!({"to": "cargo", "body": {"type": "build", "source": "/data/work/gus"}}),
            ),
            call("note", json!({"text": "gus was here"})),
            call(
                "send_message",
                json!({"to": "echo", "body": {"type": "hi"}}),
            ),
            text("I may not."),
        ],
    );
    let results = tool_results(&host);
    for refused in &results {
        assert!(
            refused.starts_with("refused: you act for gus, who is a guest in this world"),
            "{refused}"
        );
    }
    assert!(results[4].contains("messages to actors (here to echo)"));
    assert!(!target.exists());
    assert!(!data.join("notes.md").exists());
    assert!(
        tool_sends(&host).is_empty(),
        "a guest's turn sends no message to any actor"
    );
}

/// The broker's `list` answer, as a reply to the agent's message `to`.
fn list_reply(id: &str, to: &str) -> Event {
    reply(
        id,
        "broker",
        to,
        json!({"type": "actors", "actors": [
            {"id": "notes", "kind": "wasm", "owner": "mia"},
            {"id": "echo", "kind": "wasm", "owner": "bob"},
            {"id": "agent", "kind": "wasm", "owner": "owner"},
            {"id": "cargo", "kind": "native", "owner": null},
        ]}),
    )
}

#[test]
fn a_member_changes_only_actors_the_list_says_they_own_and_owns_what_they_spawn() {
    let data = world(CONFIG);
    let upgrade = |actor: &str| json!({"to": "broker", "body": {"type": "upgrade", "actor": actor, "wasm": "/actor/cargo/public/builds/2/x.wasm"}});
    let host = run(
        &data,
        vec![
            says("m-1", "mia", "member", "upgrade my actors"),
            // An actor's forged list, replying first, is not the broker's word: it is dropped.
            reply(
                "m-0",
                "notes",
                "agent/person.mia.t1",
                json!({"type": "actors", "actors": [
                {"id": "echo", "kind": "wasm", "owner": "mia"}]}),
            ),
            list_reply("m-2", "agent/person.mia.t1"),
            list_reply("m-3", "agent/person.mia.t2"),
            checkpointed("agent/person.mia.k3", "notes"),
            // Nobody answers the third list: its owner cannot be checked.
            Event::TimedOut,
            checkpointed("agent/person.mia.k6", "mine"),
        ],
        vec![
            call("send_message", upgrade("echo")),
            call("send_message", upgrade("notes")),
            call("send_message", upgrade("echo")),
            call("send_message", upgrade("agent")),
            call(
                "send_message",
                json!({"to": "broker", "body": {"type": "spawn", "actor": "mine", "wasm": "/actor/cargo/public/builds/3/m.wasm", "owner": "bob"}}),
            ),
            text("Done what I may."),
        ],
    );
    let sends: Vec<(String, Value)> = tool_sends(&host)
        .iter()
        .map(|m| (m.to.clone().unwrap(), m.body.clone()))
        .collect();
    let kinds: Vec<(&str, &str)> = sends
        .iter()
        .map(|(to, body)| (to.as_str(), body["type"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("broker", "list"),
            ("broker", "list"),
            ("broker", "checkpoint"),
            ("broker", "upgrade"),
            ("broker", "list"),
            ("broker", "checkpoint"),
            ("broker", "spawn")
        ]
    );
    assert_eq!(sends[3].1["actor"], "notes");
    assert_eq!(
        (&sends[2].1["actor"], &sends[5].1["actor"]),
        (&json!("notes"), &json!("mine")),
        "each change is kept first, for a rewind"
    );
    assert_eq!(
        sends[6].1["owner"], "mia",
        "the agent names the person it acts for"
    );
    assert!(
        tool_sends(&host)
            .iter()
            .all(|m| m.speaks_for.as_deref() == Some("mia")),
        "every request to the broker carries `as`"
    );
    let results = tool_results(&host);
    assert!(
        results[0].contains("echo belongs to bob, not to mia"),
        "{results:?}"
    );
    assert!(
        results[1].starts_with("sent as agent/person.mia.t4"),
        "{results:?}"
    );
    assert!(
        results[2].contains("could not check who owns echo"),
        "{}",
        results[2]
    );
    for kept in ["inbox.json", "people/mia/history.json"] {
        let text = std::fs::read_to_string(data.join(kept)).unwrap_or_default();
        assert!(
            !text.contains("m-0"),
            "the forged list reached {kept}: {text}"
        );
    }
    assert!(
        results[3].contains("only owners may change the agent"),
        "{}",
        results[3]
    );
}

#[test]
fn a_room_is_one_history_that_every_member_hears_and_no_private_one_holds() {
    let data = world(CONFIG);
    let room = |id: &str, person: &str, tier: &str, body: Value| {
        Event::Message(from_person(id, person, tier, "console", body))
    };
    let in_room = |id: &str, person: &str, text: &str| {
        let body = json!({"type": "text", "text": text, "room": "team"});
        Event::Message(from_person(id, person, "member", "web", body))
    };
    let host = run(
        &data,
        vec![
            room(
                "m-1",
                "owner",
                "owner",
                json!({"type": "room", "room": "team", "members": ["ann", "bob"]}),
            ),
            Event::Message(from_person(
                "m-2",
                "bob",
                "member",
                "phone",
                json!({"type": "text", "text": "hello"}),
            )),
            in_room("m-3", "ann", "let us plan the party"),
            in_room("m-4", "cid", "may I join?"),
            says("m-5", "ann", "member", "a private question"),
            Event::Message(from_person(
                "m-6",
                "cid",
                "member",
                "web",
                json!({"type": "conversation", "room": "team"}),
            )),
            Event::Message(from_person(
                "m-7",
                "bob",
                "member",
                "phone",
                json!({"type": "conversation", "room": "team"}),
            )),
        ],
        vec![
            text("hi bob"),
            text("Party on Friday."),
            text("private answer"),
        ],
    );
    let created = replies_of(&host, "room_created");
    assert_eq!(
        created[0].body,
        json!({"type": "room_created", "room": "team", "members": ["ann", "bob"],
               "unheard": ["ann", "bob"], "for": "owner"})
    );
    let room_answers: Vec<(String, String, Option<String>)> = host
        .sent
        .iter()
        .filter(|m| m.body["type"] == "text" && m.body["turn"] == "m-3")
        .map(|m| {
            assert_eq!(m.body["room"], "team");
            (
                m.to.clone().unwrap(),
                m.body["for"].as_str().unwrap().to_string(),
                m.reply_to.clone(),
            )
        })
        .collect();
    assert_eq!(
        room_answers,
        [
            ("web".into(), "ann".into(), Some("m-3".into())),
            ("phone".into(), "bob".into(), None)
        ],
        "the asker gets the reply, every other member a copy on the surface they last used"
    );
    // cid is no member: refused in words, no request made for it.
    let refused = &finals(&host)[3];
    assert_eq!(
        (refused.1.as_str(), refused.2.as_deref()),
        ("cid", Some("m-4"))
    );
    assert!(
        refused.3.contains("cid is not a member of room `team`"),
        "{refused:?}"
    );
    assert_eq!(host.requests.len(), 3);
    let requests = requests(&host);
    assert!(requests[1].1.contains("let us plan the party"));
    assert!(requests[1].1.contains("by ann"));
    for (n, (_, body)) in requests.iter().enumerate().filter(|(n, _)| *n != 1) {
        assert!(
            !body.contains("plan the party"),
            "private request {n}: {body}"
        );
    }
    let conversations = replies_of(&host, "conversation");
    assert_eq!(conversations.len(), 1, "only bob may read the room");
    assert_eq!(
        conversations[0].body["entries"][0],
        json!({"role": "user", "id": "m-3", "from": "web", "person": "ann", "text": "let us plan the party", "rewindable": false})
    );
    assert_eq!(conversations[0].body["room"], "team");
    let errors = replies_of(&host, "error");
    assert!(
        errors[0].body["reason"]
            .as_str()
            .unwrap()
            .contains("cid is not a member")
    );
    assert_eq!(
        (&errors[0].body["for"], &errors[0].body["room"]),
        (&json!("cid"), &json!("team"))
    );
}

#[test]
fn rooms_are_made_only_by_owners_and_only_with_right_values() {
    let data = world(CONFIG);
    let request = |id: &str, tier: &str, body: Value| {
        Event::Message(from_person(id, "ann", tier, "web", body))
    };
    let host = run(
        &data,
        vec![
            request(
                "m-1",
                "member",
                json!({"type": "room", "room": "team", "members": ["ann"]}),
            ),
            request(
                "m-2",
                "owner",
                json!({"type": "room", "room": "Team One", "members": ["ann"]}),
            ),
            request(
                "m-3",
                "owner",
                json!({"type": "room", "room": "team", "members": ["ann", "Bob?"]}),
            ),
            request(
                "m-4",
                "owner",
                json!({"type": "room", "room": "team", "members": []}),
            ),
            Event::Message(Incoming {
                id: "m-5".into(),
                from: "echo".into(),
                body: json!({"type": "room", "room": "team", "members": ["echo"]}),
                ..Incoming::default()
            }),
            // echo acts for a member, so its room is refused as hers would be.
            reply(
                "m-6",
                "broker",
                "agent/owner.m-5",
                json!({"type": "principal", "actor": "echo", "person": "mia", "tier": "member"}),
            ),
        ],
        vec![],
    );
    let reasons: Vec<String> = replies_of(&host, "error")
        .iter()
        .map(|m| m.body["reason"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reasons.len(), 5, "{reasons:?}");
    assert!(reasons[0].contains("only owners create or change rooms, and ann is a member"));
    assert!(reasons[1].contains("rules of actor ids"), "{}", reasons[1]);
    assert!(
        reasons[2].contains("`Bob?` is not a person's id"),
        "{}",
        reasons[2]
    );
    assert!(
        reasons[3].contains("give the ids of the people"),
        "{}",
        reasons[3]
    );
    assert!(
        reasons[4].contains("actor echo does not act for one"),
        "{}",
        reasons[4]
    );
    assert!(!data.join("rooms").exists(), "nothing changed");
}

#[test]
fn memory_is_kept_for_its_person_shown_only_to_them_and_forgotten() {
    let data = world(CONFIG);
    let ask = |id: &str, kind: &str| {
        Event::Message(from_person(
            id,
            "ann",
            "guest",
            "web",
            json!({"type": kind}),
        ))
    };
    let host = run(
        &data,
        vec![
            says(
                "m-1",
                "ann",
                "guest",
                "I prefer short answers; remember that",
            ),
            says("m-2", "bob", "guest", "hello"),
            says("m-3", "ann", "guest", "what do you remember about me?"),
            ask("m-4", "memory"),
            ask("m-5", "forget"),
            ask("m-6", "memory"),
        ],
        vec![
            call("remember", json!({"text": "  "})),
            call("remember", json!({"text": "prefers short answers"})),
            text("Noted."),
            text("hi"),
            text("You prefer short answers."),
        ],
    );
    let results = tool_results(&host);
    assert!(
        results[0].starts_with("error: `text` must be"),
        "{results:?}"
    );
    assert!(results[1].starts_with("remembered for ann"), "{results:?}");
    let requests = requests(&host);
    assert_eq!(requests[3].0, "bob");
    assert!(!requests[3].1.contains("prefers short answers"));
    assert!(requests[4].1.contains("## What you remember about ann"));
    assert!(requests[4].1.contains("- prefers short answers"));
    let memories = replies_of(&host, "memory");
    assert_eq!(
        memories[0].body,
        json!({"type": "memory", "text": "- prefers short answers\n", "for": "ann"})
    );
    assert_eq!(
        replies_of(&host, "forgotten")[0].body,
        json!({"type": "forgotten", "for": "ann"})
    );
    assert_eq!(memories[1].body["text"], "");
}

#[test]
fn each_tier_has_its_own_daily_cap_and_others_go_on() {
    let config = |extra: Value| {
        let mut config: Value = serde_json::from_str(CONFIG).unwrap();
        config["prices"] = json!({"m": {"input": 1.0, "output": 1.0}});
        for (key, value) in extra.as_object().unwrap() {
            config[key] = value.clone();
        }
        config.to_string()
    };
    let spent = json!({"day": "2026-12-01", "usd": 2.0,
        "people": {"gus": {"usd": 1.0}, "mia": {"usd": 1.0}}});
    let now = std::time::UNIX_EPOCH + Duration::from_secs(1_796_083_200 + 3600);
    let play = |data: &Path| {
        std::fs::write(data.join("spend.json"), spent.to_string()).unwrap();
        let host = ScriptedHost {
            events: vec![
                says("m-1", "gus", "guest", "hi"),
                says("m-2", "mia", "member", "hi"),
            ]
            .into(),
            answers: vec![text("hello mia")].into(),
            clock: Some(now),
            ..ScriptedHost::default()
        };
        let mut agent = Agent::new(host, data, "agent", "2", false);
        agent.run();
        agent.host
    };
    let host = play(&world(&config(json!({}))));
    let finals = finals(&host);
    assert!(
        finals[0].3.contains("gus's model spending today is $1.00")
            && finals[0].3.contains("daily cap of a guest is $1.00")
            && finals[0].3.contains("in 23 h 00 min"),
        "{finals:?}"
    );
    assert_eq!(host.sent[0].body["stopped"], "budget");
    assert_eq!(finals[1].3, "hello mia", "a member's cap is 10 USD");
    assert_eq!(host.requests.len(), 1);

    let host = play(&world(&config(json!({"tier_day_usd": {"member": 0.5}}))));
    assert!(host.requests.is_empty());
    let words = &finals_text(&host)[1];
    assert!(
        words.contains("daily cap of a member is $0.5000 (tier_day_usd"),
        "{words}"
    );
}

pub(super) fn finals_text(host: &ScriptedHost) -> Vec<String> {
    finals(host).into_iter().map(|f| f.3).collect()
}

#[test]
fn waiting_texts_are_served_round_robin_by_person() {
    let data = world(CONFIG);
    let arrive = |id: &str, person: &str| {
        from_person(
            id,
            person,
            "member",
            "web",
            json!({"type": "text", "text": id}),
        )
    };
    let host = ScriptedHost {
        events: vec![says("m-1", "ann", "member", "m-1")].into(),
        // While ann's first turn asks the model, two more of hers and one of bob's arrive.
        arrivals: vec![
            (0, arrive("m-2", "ann")),
            (0, arrive("m-3", "ann")),
            (0, arrive("m-4", "bob")),
        ],
        respond: Some(Box::new(|_| text("ok"))),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let order: Vec<String> = finals(&agent.host)
        .into_iter()
        .map(|(_, _, reply_to, _)| reply_to.unwrap())
        .collect();
    assert_eq!(order, ["m-1", "m-4", "m-2", "m-3"]);
}

#[test]
fn past_the_hourly_limit_a_text_is_answered_at_once_with_when_to_ask_again() {
    let data = world(CONFIG);
    let limit = fairness::GUEST_TURNS_PER_HOUR;
    let mut events: Vec<Event> = (0..=limit)
        .map(|n| says(&format!("m-{n}"), "gus", "guest", "again"))
        .collect();
    events.push(says("m-99", "owner", "owner", "me too"));
    let host = ScriptedHost {
        events: events.into(),
        respond: Some(Box::new(|_| text("ok"))),
        clock: Some(std::time::UNIX_EPOCH + Duration::from_secs(1_796_083_200)),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    let host = agent.host;
    assert_eq!(host.requests.len(), limit + 1, "gus's 20, then the owner's");
    let texts = finals_text(&host);
    assert!(texts[..limit].iter().all(|t| t == "ok"));
    assert!(
        texts[limit].contains("asked 20 times within the last hour")
            && texts[limit].contains("ask again in 1 h 00 min"),
        "{}",
        texts[limit]
    );
    assert_eq!(texts[limit + 1], "ok", "an owner has no hourly limit");
}

#[test]
fn the_single_history_of_an_old_agent_becomes_the_first_owners() {
    let data = world(CONFIG);
    let old = History {
        sent: 4,
        entries: vec![
            Entry::user("Message m-1 from console:\nthe old talk"),
            Entry::assistant("old answer"),
        ],
    };
    history::save(&data.join("history.json"), &old).unwrap();
    let host = run(
        &data,
        vec![
            says("m-2", "gus", "guest", "hi"),
            says("m-3", "ann", "member", "hi"),
            says("m-4", "boss", "owner", "what did we talk about?"),
            says("m-5", "zoe", "owner", "and with me?"),
        ],
        vec![
            text("hi"),
            text("hi"),
            text("the old talk"),
            text("nothing yet"),
        ],
    );
    let requests = requests(&host);
    let with_old: Vec<&str> = requests
        .iter()
        .filter(|(_, body)| body.contains("the old talk"))
        .map(|(person, _)| person.as_str())
        .collect();
    assert_eq!(with_old, ["boss"]);
    assert!(!data.join("history.json").exists(), "moved, not copied");
    let boss = history::load(&Conversation::Person("boss".into()).history(&data)).unwrap();
    assert_eq!(boss.entries[0], old.entries[0]);
    assert_eq!(boss.sent, 4);
}

#[test]
fn no_path_trick_reads_another_persons_folder() {
    let data = world(CONFIG);
    let bob = data.join("people/bob");
    std::fs::create_dir_all(&bob).unwrap();
    std::fs::write(bob.join("memory.md"), "- bob's pin is 4321\n").unwrap();
    let sneaky = format!("{}/work/ann/../../people//bob/memory.md", data.display());
    let host = run(
        &data,
        vec![says("m-1", "ann", "owner", "read bob's memory")],
        vec![
            call("read_file", json!({"path": sneaky})),
            call("search", json!({"pattern": "pin", "path": data})),
            call(
                "find_files",
                json!({"pattern": "*.md", "path": format!("{}/people/", data.display())}),
            ),
            text("I may not."),
        ],
    );
    let results = tool_results(&host);
    assert_eq!(results.len(), 3);
    for result in &results {
        assert!(result.starts_with("refused: "), "{result}");
        assert!(!result.contains("4321"));
    }
    assert!(results[0].contains("bob's private conversation and memory"));
}

#[test]
fn a_goal_is_its_persons_and_guests_may_not_start_one() {
    let data = world(CONFIG);
    let goal = |id: &str, person: &str, tier: &str| {
        let body = json!({"type": "goal", "text": "tidy up", "max_rounds": 1});
        Event::Message(from_person(id, person, tier, "web", body))
    };
    let host = run(
        &data,
        vec![goal("m-1", "gus", "guest"), goal("m-2", "mia", "member")],
        vec![call(
            "goal_status",
            json!({"status": "done", "summary": "tidied"}),
        )],
    );
    let errors = replies_of(&host, "error");
    assert!(
        errors[0].body["reason"]
            .as_str()
            .unwrap()
            .contains("may not start goals")
    );
    assert_eq!(errors[0].body["for"], "gus");
    let requests = requests(&host);
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].0, "mia");
    let done = replies_of(&host, "goal_done");
    assert_eq!(
        (&done[0].body["for"], done[0].to.as_deref()),
        (&json!("mia"), Some("web"))
    );
    assert!(Conversation::Person("mia".into()).history(&data).exists());
}

#[test]
fn a_turn_and_inbox_saved_before_people_finish_in_the_old_history() {
    let data = world(CONFIG);
    let old = History {
        sent: 1,
        entries: vec![
            Entry::user("Message m-1 from console:\nupgrade yourself"),
            Entry::ToolCall {
                id: "c-old".into(),
                name: "send_message".into(),
                arguments: json!({"to": "broker", "body": {"type": "upgrade", "actor": "agent"}}),
                item_id: None,
            },
        ],
    };
    history::save(&data.join("history.json"), &old).unwrap();
    // As the agent before people wrote them: no conversation, no person, untagged ids.
    std::fs::write(
        data.join("turn.json"),
        json!({"message": {"id": "m-1", "from": "console", "body": {"type": "text", "text": "upgrade yourself"}},
               "steps": 1}).to_string(),
    )
    .unwrap();
    std::fs::write(
        data.join("inbox.json"),
        json!({"notes": [{"id": "m-2", "from": "broker", "reply_to": "agent/t1",
                          "body": {"type": "upgraded", "version": 2}}], "turns": []})
        .to_string(),
    )
    .unwrap();
    let host = run(&data, vec![], vec![text("I am version 2 now.")]);
    let (to, person, reply_to, words) = finals(&host).remove(0);
    assert_eq!((to.as_str(), person.as_str()), ("console", ""));
    assert_eq!(
        (reply_to.as_deref(), words.as_str()),
        (Some("m-1"), "I am version 2 now.")
    );
    let request = &requests(&host)[0].1;
    assert!(request.contains("upgrade yourself") && request.contains(r#"\"upgraded\""#));
    assert!(request.contains("before the agent knew people"));
    assert!(history(&data.join("history.json")).entries.len() > old.entries.len());
}

fn history(path: &Path) -> History {
    history::load(path).unwrap()
}

#[test]
fn a_stop_from_someone_who_may_not_give_it_costs_the_request_once_and_the_turn_goes_on() {
    let data = world(CONFIG);
    // Bob's stop of Ann's turn comes while its request streams: it is dropped before the stop
    // is weighed, then refused, and the request is made again.
    let stop = from_person(
        "m-2",
        "bob",
        "member",
        "web",
        json!({"type": "stop", "turn": "m-1"}),
    );
    let host = ScriptedHost {
        events: vec![says("m-1", "ann", "member", "hello")].into(),
        answers: vec![text("Hello, Ann."), text("Hello again, Ann.")].into(),
        arrivals: vec![(0, stop)],
        ..ScriptedHost::default()
    };
    let host = run_with(&data, host);
    assert_eq!(host.requests.len(), 2, "the dropped request is made again");
    let refusal = &replies_of(&host, "error")[0].body;
    assert_eq!(refusal["request"], "stop");
    assert!(
        refusal["reason"]
            .as_str()
            .unwrap()
            .contains("not yours to stop")
    );
    assert_eq!(finals_text(&host), ["Hello again, Ann."]);
}

#[test]
fn only_the_people_of_a_conversation_stop_its_turn_or_answer_its_question() {
    let data = world(CONFIG);
    let person = |id: &str, who: &str, reply_to: Option<&str>, body: Value| {
        let mut message = from_person(id, who, "member", "web", body);
        message.reply_to = reply_to.map(str::to_string);
        Event::Message(message)
    };
    let host = run(
        &data,
        vec![
            says("m-1", "ann", "member", "pick a colour with me"),
            person("m-2", "bob", None, json!({"type": "stop", "turn": "m-1"})),
            person(
                "m-3",
                "bob",
                Some("agent/person.ann.q1"),
                json!({"type": "answer", "text": "black"}),
            ),
            person(
                "m-4",
                "ann",
                Some("agent/person.ann.q1"),
                json!({"type": "answer", "text": "green"}),
            ),
        ],
        vec![
            call("ask", json!({"question": "Which colour?"})),
            text("Green it is."),
        ],
    );
    let refusal = &replies_of(&host, "error")[0].body;
    assert_eq!(refusal["request"], "stop");
    assert_eq!(refusal["for"], "bob");
    assert!(
        refusal["reason"]
            .as_str()
            .unwrap()
            .contains("not yours to stop")
    );
    let results = tool_results(&host);
    assert_eq!(results, ["ann answered: green"]);
    assert_eq!(finals_text(&host), ["Green it is."]);
}

#[test]
fn what_a_publisher_publishes_reaches_the_conversation_that_subscribed_to_it() {
    let data = world(CONFIG);
    let tick = Event::Message(Incoming {
        id: "m-3".into(),
        from: "ticker".into(),
        body: json!({"type": "tick", "n": 7}),
        ..Incoming::default()
    });
    let host = run(
        &data,
        vec![
            says("m-1", "ann", "owner", "follow the ticker"),
            reply(
                "m-2",
                "broker",
                "agent/person.ann.t1",
                json!({"type": "subscribed", "actor": "ticker"}),
            ),
            tick,
            says("m-4", "bob", "member", "anything new?"),
            says("m-5", "ann", "owner", "anything new?"),
        ],
        vec![
            call(
                "send_message",
                json!({"to": "broker", "body": {"type": "subscribe", "actor": "ticker"}, "wait_seconds": 5}),
            ),
            text("Subscribed."),
            text("Nothing for you."),
            text("The ticker says 7."),
        ],
    );
    let requests = requests(&host);
    assert_eq!(
        (requests[2].0.as_str(), requests[3].0.as_str()),
        ("bob", "ann")
    );
    assert!(!requests[2].1.contains(r#"\"type\":\"tick\""#));
    assert!(
        requests[3].1.contains(r#"\"type\":\"tick\""#),
        "{}",
        requests[3].1
    );
}

#[test]
fn a_conversation_keeps_at_most_its_limit_of_messages_dropping_the_oldest() {
    let data = world(CONFIG);
    let ticks: Vec<Event> = (0..=MAX_KEPT_NOTES)
        .map(|n| {
            Event::Message(Incoming {
                id: format!("m-{n}"),
                from: "ticker".into(),
                body: json!({"type": "tick", "n": n}),
                ..Incoming::default()
            })
        })
        .collect();
    run(&data, ticks, vec![]);
    let inbox: Value = read_json(&data.join("inbox.json")).unwrap();
    let notes = inbox["notes"].as_array().unwrap();
    assert_eq!(notes.len(), MAX_KEPT_NOTES);
    assert_eq!(
        (&notes[0]["id"], &notes[0]["conversation"]),
        (&json!("m-1"), &json!({"actor": "ticker"}))
    );
}

#[test]
fn a_request_to_the_scheduler_speaks_for_the_person_and_nothing_else_does() {
    let data = world(CONFIG);
    let schedule = json!({"type": "schedule", "cron": "0 9 * * *", "tz": "Europe/Berlin",
        "to": "agent", "body": {"type": "text", "text": "summarise yesterday's errors"}});
    let host = run(
        &data,
        vec![says(
            "m-1",
            "ann",
            "member",
            "every morning at 9, summarise the errors",
        )],
        vec![
            call("send_message", json!({"to": "scheduler", "body": schedule})),
            call(
                "send_message",
                json!({"to": "echo", "body": {"type": "hi"}}),
            ),
            text("Scheduled."),
        ],
    );
    let sends = tool_sends(&host);
    assert_eq!(sends.len(), 2);
    assert_eq!(sends[0].to.as_deref(), Some("scheduler"));
    assert_eq!(sends[0].speaks_for.as_deref(), Some("ann"));
    let line: Value = serde_json::from_str(&serde_json::to_string(sends[0]).unwrap()).unwrap();
    assert_eq!(line["as"], "ann");
    assert_eq!(
        sends[1].speaks_for, None,
        "only the scheduler is told whose a request is"
    );
    assert!(
        host.sent
            .iter()
            .filter(|m| m.id.is_none())
            .all(|m| m.speaks_for.is_none())
    );
}

#[test]
fn a_scheduled_text_starts_a_turn_for_its_person_answered_where_they_read() {
    let data = world(CONFIG);
    let scheduled = Event::Message(from_person(
        "m-2",
        "ann",
        "member",
        "scheduler",
        json!({"type": "text", "text": "summarise yesterday's errors"}),
    ));
    let host = run(
        &data,
        vec![says("m-1", "ann", "member", "hello"), scheduled],
        vec![text("Hello."), text("No errors yesterday.")],
    );
    let finals = finals(&host);
    assert_eq!(finals.len(), 2, "{finals:?}");
    assert_eq!(
        finals[1],
        (
            "web".to_string(),
            "ann".to_string(),
            None,
            "No errors yesterday.".to_string()
        ),
        "the answer goes to ann's surface, not back to the scheduler"
    );
    let (person, request) = &requests(&host)[1];
    assert_eq!(person, "ann");
    assert!(request.contains("summarise yesterday's errors") && request.contains("Hello."));
}
