//! Rewind (DESIGN §21) through [`ScriptedHost`]: a turn that writes a file, upgrades two actors
//! and tells a third, then its rewind: what the agent asks the broker, the file and the
//! conversation put back, what it cannot recall, and who may ask.

use serde_json::{Value, json};

use super::people_tests::{CONFIG, call, checkpointed, from_person, reply, run, says, text, world};
use super::*;

fn rewind(id: &str, person: &str, tier: &str, turn: &str) -> Event {
    Event::Message(from_person(
        id,
        person,
        tier,
        "web",
        json!({"type": "rewind", "turn": turn}),
    ))
}

fn restored(reply_to: &str, actor: &str) -> Event {
    reply(
        "m-r",
        "broker",
        reply_to,
        json!({"type": "restored", "actor": actor, "version": 1, "from": 2}),
    )
}

/// `work/x.txt`, holding "old" before the turn.
fn old_file(data: &std::path::Path) {
    std::fs::create_dir_all(data.join("work")).unwrap();
    std::fs::write(data.join("work/x.txt"), "old").unwrap();
}

/// The turn's calls: write `work/x.txt`, upgrade `a` and `b`, tell `echo`.
fn the_turns_calls(data: &std::path::Path) -> Vec<crate::testing::Answer> {
    let upgrade = |actor: &str| json!({"to": "broker", "body": {"type": "upgrade", "actor": actor, "wasm": "/actor/cargo/public/builds/2/x.wasm"}});
    vec![
        call(
            "write_file",
            json!({"path": data.join("work/x.txt"), "content": "new"}),
        ),
        call("send_message", upgrade("a")),
        call("send_message", upgrade("b")),
        call(
            "send_message",
            json!({"to": "echo", "body": {"type": "hello"}}),
        ),
        text("Done."),
    ]
}

fn rewound(host: &crate::testing::ScriptedHost) -> Value {
    host.sent
        .iter()
        .find(|m| {
            matches!(m.body["type"].as_str(), Some("rewound" | "error"))
                && m.body.get("request").is_none_or(|r| r == "rewind")
        })
        .map(|m| m.body.clone())
        .expect("an answer to the rewind")
}

#[test]
fn a_rewind_puts_back_both_actors_the_file_and_the_conversation_and_says_what_left() {
    let data = world(CONFIG);
    old_file(&data);
    let events = vec![
        says("m-1", "olga", "owner", "change things"),
        checkpointed("agent/person.olga.k1", "a"),
        checkpointed("agent/person.olga.k3", "b"),
        rewind("m-2", "olga", "owner", "m-1"),
        restored("agent/rewind.r1", "b"),
        restored("agent/rewind.r2", "a"),
    ];
    let host = run(&data, events, the_turns_calls(&data));
    let checkpoints: Vec<&Value> = host
        .sent
        .iter()
        .filter(|m| m.body["type"] == "checkpoint")
        .map(|m| &m.body)
        .collect();
    assert_eq!(
        checkpoints,
        [
            &json!({"type": "checkpoint", "turn": "m-1", "actor": "a"}),
            &json!({"type": "checkpoint", "turn": "m-1", "actor": "b"}),
        ]
    );
    let restores: Vec<(&Value, Option<&str>)> = host
        .sent
        .iter()
        .filter(|m| m.body["type"] == "restore")
        .map(|m| (&m.body, m.speaks_for.as_deref()))
        .collect();
    assert_eq!(
        restores,
        [
            (
                &json!({"type": "restore", "turn": "m-1", "actor": "b"}),
                Some("olga")
            ),
            (
                &json!({"type": "restore", "turn": "m-1", "actor": "a"}),
                Some("olga")
            ),
        ],
        "the last change is undone first, each for the person who asked"
    );
    let answer = rewound(&host);
    assert_eq!(answer["type"], "rewound", "{answer}");
    assert_eq!(answer["actors"].as_array().unwrap().len(), 2, "{answer}");
    assert_eq!(answer["files"], json!([data.join("work/x.txt")]));
    assert_eq!(
        std::fs::read_to_string(data.join("work/x.txt")).unwrap(),
        "old"
    );
    assert_eq!(
        answer["not_recalled"],
        json!(["the message to echo: hello: it has left"])
    );
    assert!(
        answer["conversation"]
            .as_str()
            .unwrap()
            .starts_with("cut before message m-1"),
        "{answer}"
    );
    let history = history::load(&Conversation::Person("olga".into()).history(&data)).unwrap();
    assert!(
        !history
            .entries
            .iter()
            .any(|e| matches!(e, Entry::User { text } if text.contains("m-1"))),
        "{:?}",
        history.entries
    );
    assert!(
        !data.join("checkpoints/m-1").exists(),
        "a rewound turn cannot be rewound twice"
    );
}

#[test]
fn only_owners_and_the_member_whose_turn_touched_only_their_actors_may_rewind() {
    let data = world(CONFIG);
    old_file(&data);
    // The member's turn asks each owner first (the list), then keeps, then upgrades.
    let events = vec![
        says("m-1", "mia", "member", "change things"),
        reply(
            "m-l1",
            "broker",
            "agent/person.mia.t1",
            json!({"type": "actors", "actors": [{"id": "a", "kind": "wasm", "owner": "mia"}, {"id": "b", "kind": "wasm", "owner": "mia"}]}),
        ),
        checkpointed("agent/person.mia.k2", "a"),
        reply(
            "m-l2",
            "broker",
            "agent/person.mia.t4",
            json!({"type": "actors", "actors": [{"id": "a", "kind": "wasm", "owner": "mia"}, {"id": "b", "kind": "wasm", "owner": "mia"}]}),
        ),
        checkpointed("agent/person.mia.k5", "b"),
        // Another member, a guest, a missing turn: refused.
        rewind("m-2", "bob", "member", "m-1"),
        rewind("m-3", "gus", "guest", "m-1"),
        rewind("m-4", "mia", "member", "m-99"),
        // Without a turn, bob's last turn that changed something: he has none.
        rewind("m-5", "bob", "member", ""),
        // b was given to bob since: mia may no longer rewind the turn.
        rewind("m-6", "mia", "member", "m-1"),
        reply(
            "m-l3",
            "broker",
            "agent/rewind.r1",
            json!({"type": "actors", "actors": [{"id": "a", "kind": "wasm", "owner": "mia"}, {"id": "b", "kind": "wasm", "owner": "bob"}]}),
        ),
    ];
    let host = run(&data, events, the_turns_calls(&data));
    let refusals: Vec<(String, String)> = host
        .sent
        .iter()
        .filter(|m| m.body["request"] == "rewind")
        .map(|m| {
            (
                m.reply_to.clone().unwrap_or_default(),
                m.body["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let says = |id: &str, words: &str| {
        let reason = &refusals.iter().find(|(to, _)| to == id).expect(id).1;
        assert!(reason.contains(words), "{id}: {reason}");
    };
    says("m-2", "not yours to rewind");
    says("m-3", "not yours to rewind");
    says("m-4", "has nothing to rewind");
    says(
        "m-5",
        "nothing to rewind: no turn of this conversation changed",
    );
    says("m-6", "b, which is not yours");
    assert!(
        !host.sent.iter().any(|m| m.body["type"] == "restore"),
        "nothing was restored"
    );
}

/// A rewind acts for whom it comes from, an actor for its owner (DESIGN §18, §21): a member may
/// not rewind an owner's turn, nor may a member's actor; an owner's actor may, for the owner.
#[test]
fn a_member_and_a_members_actor_may_not_rewind_an_owners_turn_and_an_owners_actor_may() {
    let data = world(CONFIG);
    old_file(&data);
    let from_actor = |id: &str, actor: &str| {
        Event::Message(Incoming {
            id: id.into(),
            from: actor.into(),
            body: json!({"type": "rewind", "turn": "m-1"}),
            ..Incoming::default()
        })
    };
    let acts_for = |request: &str, actor: &str, person: &str, tier: &str| {
        reply(
            "m-p",
            "broker",
            &format!("agent/owner.{request}"),
            json!({"type": "principal", "actor": actor, "person": person, "tier": tier}),
        )
    };
    let events = vec![
        says("m-1", "olga", "owner", "change things"),
        checkpointed("agent/person.olga.k1", "a"),
        checkpointed("agent/person.olga.k3", "b"),
        rewind("m-2", "mia", "member", "m-1"),
        from_actor("m-3", "mia-bot"),
        acts_for("m-3", "mia-bot", "mia", "member"),
        from_actor("m-4", "olga-bot"),
        acts_for("m-4", "olga-bot", "olga", "owner"),
        restored("agent/rewind.r1", "b"),
        restored("agent/rewind.r2", "a"),
    ];
    let host = run(&data, events, the_turns_calls(&data));
    let answer = |id: &str| {
        host.sent
            .iter()
            .find(|m| m.reply_to.as_deref() == Some(id) && m.body["type"] != "text")
            .unwrap_or_else(|| panic!("no answer to {id}: {:?}", host.sent))
            .body
            .clone()
    };
    for refused in ["m-2", "m-3"] {
        let body = answer(refused);
        assert_eq!(body["type"], "error", "{refused}: {body}");
        assert!(
            body["reason"]
                .as_str()
                .unwrap()
                .contains("turn m-1 is not yours to rewind"),
            "{refused}: {body}"
        );
    }
    assert_eq!(answer("m-4")["type"], "rewound", "{}", answer("m-4"));
    let restores: Vec<Option<&str>> = host
        .sent
        .iter()
        .filter(|m| m.body["type"] == "restore")
        .map(|m| m.speaks_for.as_deref())
        .collect();
    assert_eq!(
        restores,
        [Some("olga"), Some("olga")],
        "restored once, for the owner the actor acts for"
    );
}

#[test]
fn a_rewind_without_a_turn_undoes_the_last_turn_that_changed_something() {
    let data = world(CONFIG);
    let upgrade = json!({"to": "broker", "body": {"type": "upgrade", "actor": "a", "wasm": "/actor/cargo/public/builds/2/x.wasm"}});
    let events = vec![
        says("m-1", "olga", "owner", "upgrade a"),
        checkpointed("agent/person.olga.k1", "a"),
        says("m-3", "olga", "owner", "just talk"),
        Event::Message(from_person(
            "m-4",
            "olga",
            "owner",
            "console",
            json!({"type": "rewind"}),
        )),
        restored("agent/rewind.r1", "a"),
    ];
    let answers = vec![call("send_message", upgrade), text("Done."), text("Hi.")];
    let host = run(&data, events, answers);
    // Each turn's answer says whether there is something to rewind.
    let rewindable: Vec<(&str, &Value)> = host
        .sent
        .iter()
        .filter(|m| m.body["type"] == "text")
        .map(|m| (m.body["turn"].as_str().unwrap(), &m.body["rewindable"]))
        .collect();
    assert_eq!(rewindable, [("m-1", &json!(true)), ("m-3", &json!(false))]);
    let restores: Vec<&Value> = host
        .sent
        .iter()
        .filter(|m| m.body["type"] == "restore")
        .map(|m| &m.body)
        .collect();
    assert_eq!(
        restores,
        [&json!({"type": "restore", "turn": "m-1", "actor": "a"})],
        "m-3, the last turn, changed nothing: the one before it is undone"
    );
    let answer = rewound(&host);
    assert_eq!(answer["turn"], "m-1", "{answer}");
}
