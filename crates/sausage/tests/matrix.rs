//! Matrix against a real homeserver (Synapse, started by `support::synapse`, one per test
//! binary): the harness itself (users, rooms, a message round trip, typing, a 429), and the
//! `matrix` actor in a world, talking to an `echo` that stands in for the agent: invited, it
//! joins; a person's message comes back as a reply; rate limits are waited out, nothing doubled.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sausage_core::message::{ActorId, Tier};
use sausage_core::people::People;
use sausage_core::world::World;
use sausage_fake_llm::{FakeLlm, openai};
use serde_json::{Value, json};
use support::agent::{tool_outputs, world_with_agent};
use support::synapse::{
    MessageLimit, RoomKind, Synapse, User, base64_unpadded, hex, hmac_sha1, sha1,
};
use support::*;

#[test]
fn sha1_and_hmac_match_the_published_vectors() {
    assert_eq!(
        hex(&sha1(b"abc")),
        "a9993e364706816aba3e25717850c26c9cd0d89d"
    );
    // RFC 2202, test case 2.
    assert_eq!(
        hex(&hmac_sha1(b"Jefe", b"what do ya want for nothing?")),
        "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
    );
    assert_eq!(base64_unpadded(b"ab"), "YWI");
    assert_eq!(base64_unpadded(b"abc"), "YWJj");
}

#[test]
fn a_synapse_of_a_tests_own_takes_its_limits_and_is_gone_once_dropped() {
    let synapse = Synapse::start_with(MessageLimit {
        per_second: 0.1,
        burst_count: 3,
    });
    let (alice, bob) = (synapse.register("alice"), synapse.register_limited("bob"));
    let room = alice.create_room(RoomKind::Group(&[&bob]));
    bob.join(&room);
    // Bob's join is an event he sent too: it counts against the burst.
    let statuses: Vec<u16> = (0..3)
        .map(|n| bob.try_send_text(&room, &format!("message {n}")).status)
        .collect();
    assert_eq!(statuses, [200, 200, 429]);
    // Alice is exempt, as every user `register` makes.
    for n in 0..5 {
        alice.send_text(&room, &format!("free {n}"));
    }
    let addr = synapse.addr.clone();
    drop(synapse);
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "synapse still listens"
    );
}

fn bodies(messages: &[Value]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|m| m["content"]["body"].as_str())
        .collect()
}

#[test]
fn two_users_meet_in_a_group_room_and_a_message_goes_round() {
    let synapse = Synapse::shared();
    let (alice, bob) = (synapse.register("alice"), synapse.register("bob"));
    assert!(alice.id.ends_with(":sausage.test"), "{}", alice.id);
    let room = alice.create_room(RoomKind::Group(&[&bob]));
    bob.join(&room);
    let mut members = alice.joined_members(&room);
    members.sort();
    let mut expected = vec![alice.id.clone(), bob.id.clone()];
    expected.sort();
    assert_eq!(members, expected);

    let start = bob.sync(None, 0)["next_batch"]
        .as_str()
        .unwrap()
        .to_string();
    let event = alice.send_text(&room, "hello, bob");
    let messages = bob.messages(&room);
    assert_eq!(bodies(&messages), ["hello, bob"]);
    assert_eq!(messages[0]["event_id"], event.as_str());
    // A long-polled sync from before the message hands it over.
    let sync = bob.sync(Some(&start), 10_000);
    let timeline = &sync["rooms"]["join"][&room]["timeline"]["events"];
    assert!(
        timeline
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event_id"] == event.as_str()),
        "{sync:#}"
    );
}

#[test]
fn a_direct_room_is_flagged_and_typing_shows_to_the_other() {
    let synapse = Synapse::shared();
    let (alice, bot) = (synapse.register("alice"), synapse.register("bot"));
    let room = alice.create_room(RoomKind::Direct(&bot));
    let invited = bot.sync(None, 0);
    let invite = &invited["rooms"]["invite"][&room]["invite_state"]["events"];
    let me = invite
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "m.room.member" && e["state_key"] == bot.id.as_str())
        .unwrap_or_else(|| panic!("no invite for the bot: {invited:#}"));
    assert_eq!(me["content"]["is_direct"], true);
    bot.join(&room);
    let since = alice.sync(None, 0)["next_batch"]
        .as_str()
        .unwrap()
        .to_string();
    bot.set_typing(&room, true);
    let sync = alice.sync(Some(&since), 10_000);
    let ephemeral = &sync["rooms"]["join"][&room]["ephemeral"]["events"];
    assert!(
        ephemeral
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["type"] == "m.typing"
                && e["content"]["user_ids"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(bot.id))),
        "{sync:#}"
    );
}

#[test]
fn a_limited_user_sending_fast_gets_429_with_retry_after_ms() {
    let synapse = Synapse::shared();
    let (alice, flooder) = (
        synapse.register("alice"),
        synapse.register_limited("flooder"),
    );
    let room = alice.create_room(RoomKind::Group(&[&flooder]));
    flooder.join(&room);
    let limited = (0..10)
        .map(|n| flooder.try_send_text(&room, &format!("message {n}")))
        .find(|r| r.status == 429)
        .expect("a 429 within ten quick messages");
    let body = limited.json();
    assert_eq!(body["errcode"], "M_LIMIT_EXCEEDED", "{body}");
    assert!(body["retry_after_ms"].as_u64().unwrap() > 0, "{body}");
    // The same transaction id sent twice makes one event.
    let content = json!({"msgtype": "m.text", "body": "once"});
    let first = alice.send_with_txn(&room, "same", &content).json();
    let second = alice.send_with_txn(&room, "same", &content).json();
    assert_eq!(first["event_id"], second["event_id"]);
}

/// A world with `echo` as its agent and the `matrix` actor signed in as `bot` on `synapse`,
/// where `people` are known by their Matrix ids.
fn world_with_matrix(synapse: &Synapse, bot: &User, people: &[&User]) -> TestWorld {
    let world = TestWorld::new();
    world.install("agent", "echo");
    add_matrix(&world, synapse, bot, people);
    world
}

/// Lets the `matrix` actor speak for people by their Matrix ids (as `sausage matrix setup`
/// does), and makes each of `users` an owner known by theirs (`sausage people add … --matrix`);
/// a user's person id is their Matrix id's local part.
fn know(world: &TestWorld, users: &[&User]) {
    let people = People::new(&World::new(&world.root));
    people
        .grant_surface(&ActorId::parse("matrix").unwrap(), "matrix")
        .unwrap();
    for user in users {
        let local = user.id.trim_start_matches('@').split(':').next().unwrap();
        let handles = [("matrix".to_string(), user.id.clone())].into();
        people
            .add_with(&local.to_lowercase(), Tier::Owner, None, handles)
            .unwrap();
    }
}

/// Installs the `matrix` actor signed in as `bot` on `synapse`: its config in `/data`, its
/// token in `broker/credentials/matrix.json`, the homeserver in its allow-list.
fn add_matrix(world: &TestWorld, synapse: &Synapse, bot: &User, people: &[&User]) {
    know(world, people);
    let version = world.path("broker/versions/matrix/1");
    std::fs::create_dir_all(version.join("source")).unwrap();
    std::fs::copy(matrix_wasm(), version.join("actor.wasm")).unwrap();
    for dir in [
        "actor/matrix/public",
        "actor/matrix/source",
        "private/matrix/data",
    ] {
        std::fs::create_dir_all(world.path(dir)).unwrap();
    }
    let mut registry = world.json("sausage.json");
    registry["actors"]["matrix"] = json!({"version": 1, "next_version": 2, "running": true});
    std::fs::write(world.path("sausage.json"), registry.to_string()).unwrap();
    let config = json!({"homeserver": synapse.url(), "user_id": bot.id, "agent": "agent"});
    std::fs::write(
        world.path("private/matrix/data/config.json"),
        config.to_string(),
    )
    .unwrap();
    give_token(world, synapse, bot);
    world.allow_network("matrix", &[&synapse.addr]);
}

/// `bot`'s access token in `broker/credentials/matrix.json`, as `sausage matrix setup` writes it:
/// the host adds it to the actor's requests under the homeserver.
fn give_token(world: &TestWorld, synapse: &Synapse, bot: &User) {
    std::fs::create_dir_all(world.path("broker/credentials")).unwrap();
    let credentials = json!({"base_url": synapse.url(), "header": "authorization",
                             "value": format!("Bearer {}", bot.token)});
    std::fs::write(
        world.path("broker/credentials/matrix.json"),
        credentials.to_string(),
    )
    .unwrap();
}

/// Waits until `bot` is a member of `room`.
fn wait_joined(alice: &User, bot: &User, room: &str, world: &TestWorld) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !alice.joined_members(room).contains(&bot.id) {
        assert!(
            std::time::Instant::now() < deadline,
            "the matrix actor did not join {room}; its log:\n{}",
            world.log("matrix")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The bot's messages in `room` (not the people's).
fn from_bot<'a>(messages: &'a [Value], bot: &User) -> Vec<&'a Value> {
    messages
        .iter()
        .filter(|m| m["sender"] == bot.id.as_str())
        .collect()
}

#[test]
fn the_actor_joins_when_invited_and_answers_a_message_as_a_threaded_reply() {
    let synapse = Synapse::shared();
    let (alice, bot) = (synapse.register("alice"), synapse.register("sausage"));
    let world = world_with_matrix(synapse, &bot, &[&alice]);
    let room = alice.create_room(RoomKind::Direct(&bot));
    let host = world.run();
    wait_joined(&alice, &bot, &room, &world);

    let asked = alice.send_text(&room, "hello, **world**");
    let messages = alice.wait_for_messages(&room, PATIENCE, "the bot's answer", |m| {
        !from_bot(m, &bot).is_empty()
    });
    let answer = from_bot(&messages, &bot)[0];
    let content = &answer["content"];
    assert_eq!(
        content["m.relates_to"]["m.in_reply_to"]["event_id"],
        asked.as_str()
    );
    assert!(
        content["body"]
            .as_str()
            .unwrap()
            .starts_with("hello, **world**\n\n— "),
        "{content}"
    );
    assert_eq!(content["format"], "org.matrix.custom.html");
    assert!(
        content["formatted_body"]
            .as_str()
            .unwrap()
            .starts_with("<p>hello, <strong>world</strong></p>"),
        "{content}"
    );

    // A shutdown ends the long poll at once: a clean exit, well within the 5 s grace.
    let quitting = std::time::Instant::now();
    assert!(host.quit().success());
    assert!(quitting.elapsed() < Duration::from_secs(5));
    assert_eq!(world.status("matrix")["last_exit"], "exited cleanly");
    let log = world.log("matrix");
    assert!(log.contains("matrix: stopped"), "{log}");
    // Typing was shown and ended (a failed typing call is logged).
    assert!(!log.contains("typing in"), "{log}");
    let state = world.json("private/matrix/data/state.json");
    assert!(state["since"].is_string(), "{state}");
}

#[test]
fn a_rate_limited_bot_waits_out_each_429_and_sends_every_answer_once() {
    let synapse = Synapse::shared();
    let (alice, bot) = (
        synapse.register("alice"),
        synapse.register_limited("slowbot"),
    );
    let world = world_with_matrix(synapse, &bot, &[&alice]);
    let room = alice.create_room(RoomKind::Direct(&bot));
    let host = world.run();
    wait_joined(&alice, &bot, &room, &world);

    // The limit lets three answers through at once, then one every five seconds.
    let asked: Vec<String> = (0..5)
        .map(|n| alice.send_text(&room, &format!("question {n}")))
        .collect();
    let messages = alice.wait_for_messages(&room, Duration::from_secs(60), "five answers", |m| {
        from_bot(m, &bot).len() >= 5
    });
    let answers = from_bot(&messages, &bot);
    assert_eq!(answers.len(), 5, "no answer doubled");
    for (event, answer) in asked.iter().zip(&answers) {
        assert_eq!(
            answer["content"]["m.relates_to"]["m.in_reply_to"]["event_id"],
            event.as_str()
        );
    }
    let log = world.log("matrix");
    assert!(
        log.contains("429 M_LIMIT_EXCEEDED"),
        "no 429 was met: {log}"
    );
    drop(host);
}

#[test]
fn a_turn_of_the_agent_shows_as_one_edited_status_a_numbered_question_and_a_rendered_answer() {
    let synapse = Synapse::shared();
    let (alice, bot) = (synapse.register("alice"), synapse.register("sausage"));
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    add_matrix(&world, synapse, &bot, &[&alice]);
    fake.push_openai(openai::reply(vec![openai::function_call(
        "list_dir",
        json!({"path": "/data"}),
    )]));
    fake.push_openai(openai::reply(vec![openai::function_call(
        "ask",
        json!({"question": "Which colour?", "choices": ["red", "blue"]}),
    )]));
    fake.push_openai(openai::text_reply("A **blue** counter:\n\n- one\n- two"));
    let room = alice.create_room(RoomKind::Direct(&bot));
    let host = world.run();
    wait_joined(&alice, &bot, &room, &world);

    let asked = alice.send_text(&room, "make me a counter");
    let messages = alice.wait_for_messages(&room, PATIENCE, "the question", |m| {
        from_bot(m, &bot)
            .iter()
            .any(|m| m["content"]["body"].as_str().unwrap().contains("2. blue"))
    });
    let question = from_bot(&messages, &bot)
        .into_iter()
        .find(|m| m["content"]["body"].as_str().unwrap().contains("2. blue"))
        .unwrap()
        .clone();
    assert_eq!(
        question["content"]["body"],
        "Which colour?\n\n1. red\n2. blue\n\nAnswer with a number or in your own words."
    );
    assert_eq!(
        question["content"]["m.relates_to"]["m.in_reply_to"]["event_id"],
        asked.as_str()
    );
    alice.send_text(&room, "2");

    let messages = alice.wait_for_messages(&room, PATIENCE, "the final answer", |m| {
        from_bot(m, &bot).iter().any(|m| {
            m["content"]["body"]
                .as_str()
                .unwrap()
                .starts_with("A **blue**")
        })
    });
    let ours = from_bot(&messages, &bot);
    let answer = ours
        .iter()
        .find(|m| {
            m["content"]["body"]
                .as_str()
                .unwrap()
                .starts_with("A **blue**")
        })
        .unwrap();
    assert_eq!(
        answer["content"]["formatted_body"]
            .as_str()
            .unwrap()
            .split("\n<p><em>")
            .next()
            .unwrap(),
        "<p>A <strong>blue</strong> counter:</p>\n<ul>\n<li>one</li>\n<li>two</li>\n</ul>"
    );
    assert!(
        answer["content"]["body"]
            .as_str()
            .unwrap()
            .contains("\n\n— ")
    );
    assert_eq!(
        answer["content"]["m.relates_to"]["m.in_reply_to"]["event_id"],
        asked.as_str()
    );
    // The answer "2" reached the model as the second choice.
    assert!(
        tool_outputs(&fake, 2).iter().any(|o| o.contains("blue")),
        "{:?}",
        tool_outputs(&fake, 2)
    );
    // One status notice for the tool, and edits of it, never a second status message.
    let notices: Vec<&&Value> = ours
        .iter()
        .filter(|m| m["content"]["msgtype"] == "m.notice")
        .collect();
    let status = notices
        .iter()
        .find(|m| m["content"]["m.relates_to"]["rel_type"].is_null())
        .unwrap_or_else(|| panic!("no status notice: {ours:#?}"));
    assert!(
        status["content"]["body"]
            .as_str()
            .unwrap()
            .contains("list_dir"),
        "{status:#}"
    );
    let edits = notices
        .iter()
        .filter(|m| m["content"]["m.relates_to"]["rel_type"] == "m.replace")
        .count();
    assert_eq!(notices.len(), edits + 1, "{notices:#?}");
    assert!(
        edits >= 1,
        "the status line was not edited: {notices:#?}\n{}",
        world.log("matrix")
    );
    drop(host);
    fake.assert_clean();
}

#[test]
fn a_message_sent_while_the_world_is_down_after_a_kill_is_answered_once_and_none_twice() {
    let synapse = Synapse::shared();
    let (alice, bot) = (synapse.register("alice"), synapse.register("sausage"));
    let world = world_with_matrix(synapse, &bot, &[&alice]);
    let room = alice.create_room(RoomKind::Direct(&bot));
    let answered = |n: usize| {
        alice.wait_for_messages(&room, PATIENCE, &format!("{n} answers"), |m| {
            from_bot(m, &bot).len() >= n
        })
    };
    let host = world.run();
    wait_joined(&alice, &bot, &room, &world);
    alice.send_text(&room, "one");
    answered(1);
    // A hard kill: only what the actor committed (its state, synced and renamed) is left.
    host.kill();

    alice.send_text(&room, "two");
    let host = world.run();
    answered(2);
    alice.send_text(&room, "three");
    let messages = answered(3);
    // A repeat of "one" or "two" would have come before the answer to "three".
    let texts: Vec<&str> = from_bot(&messages, &bot)
        .iter()
        .map(|m| {
            m["content"]["body"]
                .as_str()
                .unwrap()
                .split("\n\n")
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(texts, ["one", "two", "three"]);
    drop(host);
}

/// Copies the `matrix` crate's source (not build output) into `to`, with an `actor.json` that
/// lets it reach `synapse`: what the host writes when it sets the actor up.
fn matrix_source(to: &Path, synapse: &Synapse) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap().flatten() {
            let name = entry.file_name();
            if name == "target" {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &to.join(&name));
            } else {
                std::fs::copy(entry.path(), to.join(&name)).unwrap();
            }
        }
    }
    copy(&repo().join("matrix"), to);
    let manifest = json!({"network": [synapse.addr]}).to_string();
    std::fs::write(to.join("actor.json"), manifest).unwrap();
}

#[test]
fn spawned_through_the_broker_the_candidate_passes_and_the_running_version_connects() {
    let synapse = Synapse::shared();
    let (alice, bot) = (synapse.register("alice"), synapse.register("sausage"));
    let world = TestWorld::new();
    world.install("agent", "echo");
    know(&world, &[&alice]);
    let source = world.root.parent().unwrap().join("matrix-source");
    matrix_source(&source, synapse);
    give_token(&world, synapse, &bot);
    let room = alice.create_room(RoomKind::Direct(&bot));
    let mut host = world.run();
    let reply = host.request(json!({
        "type": "spawn", "actor": "matrix", "wasm": matrix_wasm(), "source": source,
        "built_by": "hand",
    }));
    assert_eq!(reply["type"], "spawned", "{reply}");
    assert_eq!(reply["tests"]["passed"], true, "{reply}");
    // Configured after the spawn, as the host's setup would: a restart reads it.
    let config = json!({"homeserver": synapse.url(), "user_id": bot.id});
    std::fs::write(
        world.path("private/matrix/data/config.json"),
        config.to_string(),
    )
    .unwrap();
    assert_eq!(
        host.request(json!({"type": "stop", "actor": "matrix"}))["type"],
        "stopped"
    );
    assert_eq!(
        host.request(json!({"type": "start", "actor": "matrix"}))["type"],
        "started"
    );
    wait_joined(&alice, &bot, &room, &world);
    let asked = alice.send_text(&room, "are you there?");
    let messages = alice.wait_for_messages(&room, PATIENCE, "the answer", |m| {
        !from_bot(m, &bot).is_empty()
    });
    assert_eq!(
        from_bot(&messages, &bot)[0]["content"]["m.relates_to"]["m.in_reply_to"]["event_id"],
        asked.as_str()
    );
}

#[test]
fn an_unknown_users_invite_is_declined_and_in_a_known_ones_room_they_get_one_polite_notice() {
    let synapse = Synapse::shared();
    let (alice, eve, bot) = (
        synapse.register("alice"),
        synapse.register("eve"),
        synapse.register("sausage"),
    );
    // The agent is `echo`: what reaches it comes back, so a leak would show in a room.
    let world = world_with_matrix(synapse, &bot, &[&alice]);
    let eve_dm = eve.create_room(RoomKind::Direct(&bot));
    let alice_dm = alice.create_room(RoomKind::Direct(&bot));
    let shared = alice.create_room(RoomKind::Group(&[&bot, &eve]));
    eve.join(&shared);
    let host = world.run();
    wait_joined(&alice, &bot, &alice_dm, &world);
    wait_joined(&alice, &bot, &shared, &world);

    eve.send_text(&shared, "let me in");
    let notices = eve.wait_for_messages(&shared, PATIENCE, "the notice", |m| {
        !from_bot(m, &bot).is_empty()
    });
    let notice = &from_bot(&notices, &bot)[0]["content"];
    assert_eq!(notice["msgtype"], "m.notice", "{notice}");
    assert!(
        !notice["body"].as_str().unwrap().contains("let me in"),
        "{notice}"
    );
    eve.send_text(&shared, "hello?");
    alice.send_text(&alice_dm, "alice's own words");
    alice.wait_for_messages(&alice_dm, PATIENCE, "alice's answer", |m| {
        from_bot(m, &bot).iter().any(|a| {
            a["content"]["body"]
                .as_str()
                .unwrap_or("")
                .starts_with("alice's own words")
        })
    });
    // By the time alice's later message is answered, eve's second one and her invite have been
    // seen: still one notice, nothing of alice's where eve is, and eve's own room not joined.
    let eve_sees = eve.messages(&shared);
    assert_eq!(from_bot(&eve_sees, &bot).len(), 1, "{eve_sees:?}");
    assert!(
        !serde_json::to_string(&eve_sees)
            .unwrap()
            .contains("alice's own words")
    );
    assert!(!eve.joined_members(&eve_dm).contains(&bot.id));
    assert!(
        world.log("matrix").contains("declined the invite"),
        "{}",
        world.log("matrix")
    );
    drop(host);
}

/// The person id [`know`] gives a Matrix user.
fn person_of(user: &User) -> String {
    user.id
        .trim_start_matches('@')
        .split(':')
        .next()
        .unwrap()
        .to_lowercase()
}

/// The shared room a Matrix room is for the agent: `matrix-` and the first 32 hexadecimal
/// digits of the SHA-256 of its full id.
fn room_key(room: &str) -> String {
    use sha2::{Digest, Sha256};
    format!("matrix-{}", &hex(&Sha256::digest(room.as_bytes()))[..32])
}

#[test]
fn a_group_room_of_known_people_is_a_shared_room_whose_answers_both_see() {
    let synapse = Synapse::shared();
    let (alice, bob, bot) = (
        synapse.register("alice"),
        synapse.register("bob"),
        synapse.register("sausage"),
    );
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    add_matrix(&world, synapse, &bot, &[&alice, &bob]);
    fake.push_openai(openai::text_reply("Soup for you both."));
    fake.push_openai(openai::text_reply("Bread too."));
    let room = alice.create_room(RoomKind::Group(&[&bot, &bob]));
    bob.join(&room);
    let host = world.run();
    wait_joined(&alice, &bot, &room, &world);

    let bot_ref = &bot;
    let answered = |text: &str| {
        let text = text.to_string();
        bob.wait_for_messages(
            &room,
            PATIENCE,
            &format!("{text:?}, seen by bob"),
            move |m| {
                from_bot(m, bot_ref).iter().any(|m| {
                    m["content"]["body"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with(&text)
                })
            },
        )
    };
    alice.send_text(&room, "what is for lunch?");
    answered("Soup for you both.");
    bob.send_text(&room, "and with it?");
    let messages = answered("Bread too.");
    let soups = from_bot(&messages, &bot)
        .into_iter()
        .filter(|m| {
            m["content"]["body"]
                .as_str()
                .unwrap_or("")
                .starts_with("Soup")
        })
        .count();
    assert_eq!(
        soups, 1,
        "one answer in the room, not one per member: {messages:#?}"
    );
    // One shared conversation: bob's request holds alice's question, in the room's history.
    let sent = fake.requests()[1].body.to_string();
    assert!(
        sent.contains(&room_key(&room)) && sent.contains("what is for lunch?"),
        "{sent}"
    );
    let kept = world.json(&format!(
        "private/agent/data/rooms/{}/room.json",
        room_key(&room)
    ));
    assert_eq!(
        kept["members"],
        json!([person_of(&alice), person_of(&bob)]),
        "{kept}"
    );
    drop(host);
    fake.assert_clean();
}

#[test]
fn sausage_matrix_setup_builds_the_carried_actor_into_a_world_which_then_answers_on_matrix() {
    let synapse = Synapse::shared();
    let (alice, bot) = (synapse.register("alice"), synapse.register("sausage"));
    let world = TestWorld::new();
    world.install("agent", "echo");
    know(&world, &[&alice]);
    warm_cargo_for_matrix(&world.root);
    let setup = |args: &[&str], token: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sausage"));
        command
            .args(["matrix", "setup", "--world"])
            .arg(&world.root)
            .args(args)
            .env_remove("SAUSAGE_MATRIX_TOKEN")
            .stdin(std::process::Stdio::null());
        if let Some(token) = token {
            command.env("SAUSAGE_MATRIX_TOKEN", token);
        }
        command.output().unwrap()
    };
    // Wrong answers are refused before anything is written.
    let wrong = setup(
        &["--homeserver", "matrix.example.org", "--user", &bot.id],
        Some("t"),
    );
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("not an http://"));
    assert!(!world.path("broker/credentials/matrix.json").exists());

    let out = setup(
        &["--homeserver", &synapse.url(), "--user", &bot.id],
        Some(&bot.token),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("deploy: matrix runs version 1"), "{stdout}");
    assert_eq!(world.json("sausage.json")["actors"]["matrix"]["version"], 1);
    assert_eq!(
        world.json("broker/versions/matrix/1/meta.json")["built_by"],
        "cargo"
    );
    assert_eq!(
        world.json("actor/matrix/source/actor.json"),
        json!({"network": [synapse.addr], "window": 0}),
        "matrix keeps no window: its messages are people's conversations"
    );
    assert!(
        world.visible_files_containing(&bot.token).is_empty(),
        "the token is in no file an actor can see"
    );

    let room = alice.create_room(RoomKind::Direct(&bot));
    let host = world.run();
    wait_joined(&alice, &bot, &room, &world);
    alice.send_text(&room, "are you there?");
    alice.wait_for_messages(&room, PATIENCE, "the answer", |m| {
        from_bot(m, &bot).iter().any(|a| {
            a["content"]["body"]
                .as_str()
                .unwrap_or("")
                .starts_with("are you there?")
        })
    });
    drop(host);
}

#[test]
fn two_known_peoples_direct_rooms_are_each_their_own_private_conversation() {
    let synapse = Synapse::shared();
    let (alice, bob, bot) = (
        synapse.register("alice"),
        synapse.register("bob"),
        synapse.register("sausage"),
    );
    let fake = FakeLlm::start();
    let world = world_with_agent(&fake, "openai-responses");
    add_matrix(&world, synapse, &bot, &[&alice, &bob]);
    fake.push_openai(openai::text_reply("Kept to myself."));
    fake.push_openai(openai::text_reply("Hello Bob."));
    let alice_dm = alice.create_room(RoomKind::Direct(&bot));
    let bob_dm = bob.create_room(RoomKind::Direct(&bot));
    let host = world.run();
    wait_joined(&alice, &bot, &alice_dm, &world);
    wait_joined(&bob, &bot, &bob_dm, &world);
    let answered = |user: &User, room: &str, text: &str| {
        user.wait_for_messages(room, PATIENCE, text, |m| {
            from_bot(m, &bot).iter().any(|a| {
                a["content"]["body"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with(text)
            })
        })
    };
    alice.send_text(&alice_dm, "my secret is marmalade");
    answered(&alice, &alice_dm, "Kept to myself.");
    bob.send_text(&bob_dm, "what do you know?");
    answered(&bob, &bob_dm, "Hello Bob.");
    let for_bob = fake.requests()[1].body.to_string();
    assert!(!for_bob.contains("marmalade"), "{for_bob}");
    assert!(
        for_bob.contains(&format!("This turn acts for {}", person_of(&bob))),
        "{for_bob}"
    );
    let bob_sees = serde_json::to_string(&bob.messages(&bob_dm)).unwrap();
    assert!(!bob_sees.contains("Kept to myself") && !bob_sees.contains("marmalade"));
    drop(host);
    fake.assert_clean();
}
