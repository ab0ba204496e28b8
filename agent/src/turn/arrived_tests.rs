//! Tests of messages that arrive while the model is asked (DESIGN §20) through [`ScriptedHost`]:
//! arrivals in the middle of a streamed answer and a kill of the host in, the files a kill
//! leaves and what a restarted agent answers out. State a kill leaves is also written directly.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::people_tests::{CONFIG, finals, from_person, says, text, world};
use super::*;
use crate::testing::{Answer, KILLED, ScriptedHost};

/// Runs the agent until its host is killed ([`Answer::Kill`]); what it committed stays in `data`.
fn run_until_killed(data: &Path, host: ScriptedHost) {
    let mut agent = Agent::new(host, data, "agent", "2", false);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| agent.run()));
    let panic = ran.expect_err("the script kills the host");
    assert_eq!(
        panic.downcast_ref::<String>().map(String::as_str),
        Some(KILLED)
    );
}

/// Starts an agent on `data` that gets no new message and answers every request with `answer`.
fn restart(data: &Path, answer: &'static str) -> ScriptedHost {
    let host = ScriptedHost {
        respond: Some(Box::new(move |_| text(answer))),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, data, "agent", "2", false);
    agent.run();
    agent.host
}

/// A message ann sent from the web page.
fn from_ann(id: &str, body: Value) -> Incoming {
    from_person(id, "ann", "member", "web", body)
}

fn spool(data: &Path) -> PathBuf {
    data.join("arrived.jsonl")
}

/// Writes `arrived.jsonl` as a killed agent leaves it: one message a line.
fn write_spool(data: &Path, messages: &[Incoming]) {
    let lines: String = messages.iter().map(|m| m.to_line() + "\n").collect();
    std::fs::write(spool(data), lines).unwrap();
}

/// To whom each final answer replied, in order.
fn answered(host: &ScriptedHost) -> Vec<String> {
    finals(host)
        .into_iter()
        .map(|(_, _, reply_to, _)| reply_to.unwrap_or_default())
        .collect()
}

#[test]
fn a_message_that_arrives_mid_stream_is_on_disk_before_the_stream_ends() {
    let data = world(CONFIG);
    let Answer::Stream(whole) = text("first done") else {
        unreachable!("text streams")
    };
    let host = ScriptedHost {
        events: vec![says("m-1", "ann", "member", "first")].into(),
        // Half the answer streams, m-2 arriving in its middle, and the host dies.
        answers: vec![Answer::Kill(whole[..whole.len() / 2].to_vec())].into(),
        arrivals: vec![(
            0,
            from_ann("m-2", json!({"type": "text", "text": "second"})),
        )],
        ..ScriptedHost::default()
    };
    run_until_killed(&data, host);
    let on_disk = std::fs::read_to_string(spool(&data)).expect("arrived.jsonl was committed");
    let ids: Vec<String> = on_disk
        .lines()
        .map(|line| serde_json::from_str::<Incoming>(line).unwrap().id)
        .collect();
    assert_eq!(ids, ["m-2"]);

    // The next instance finishes m-1's turn, then answers m-2, once; the file is gone.
    let host = restart(&data, "done");
    assert_eq!(answered(&host), ["m-1", "m-2"]);
    assert!(!spool(&data).exists());
    assert!(
        restart(&data, "again").sent.is_empty(),
        "nothing is kept twice"
    );
}

#[test]
fn a_restart_after_a_kill_during_a_request_keeps_what_arrived_and_runs_its_turn() {
    let data = world(CONFIG);
    // A kill came while m-1's turn asked the model: its turn is saved, and three messages had
    // arrived: a text, a publication of an actor, and a stop for a turn that ended long ago.
    let ann = Conversation::Person("ann".into());
    let first = from_ann("m-1", json!({"type": "text", "text": "first"}));
    std::fs::create_dir_all(ann.dir(&data)).unwrap();
    let started = History {
        sent: 0,
        entries: vec![Entry::user("Message m-1 from web:\nfirst")],
    };
    history::save(&ann.history(&data), &started).unwrap();
    write_json(&data.join("turn.json"), &SavedTurn::new(first, ann)).unwrap();
    let tick = Incoming {
        id: "m-3".into(),
        from: "ticker".into(),
        body: json!({"type": "tick", "mark": "tick-mark"}),
        ..Incoming::default()
    };
    write_spool(
        &data,
        &[
            from_ann("m-2", json!({"type": "text", "text": "second"})),
            tick,
            from_ann("m-4", json!({"type": "stop", "turn": "m-0"})),
        ],
    );

    let host = restart(&data, "done");
    assert_eq!(answered(&host), ["m-1", "m-2"]);
    // The publication went to the conversation of the turn that was running: ann's next turn
    // sees it, once.
    let last = String::from_utf8(host.requests[1].body.clone()).unwrap();
    assert_eq!(last.matches("tick-mark").count(), 1, "{last}");
    let refusals: Vec<&Outgoing> = host
        .sent
        .iter()
        .filter(|m| m.body["type"] == "error")
        .collect();
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0].reply_to.as_deref(), Some("m-4"));
    assert!(!spool(&data).exists());
    assert!(!data.join("turn.json").exists());
}

#[test]
fn a_message_both_in_the_inbox_and_in_arrived_is_kept_once() {
    let data = world(CONFIG);
    // A kill came after m-2 and the link reached inbox.json and before arrived.jsonl went.
    let link = from_ann("m-1", json!({"type": "link", "mark": "link-mark"}));
    let second = from_ann("m-2", json!({"type": "text", "text": "second"}));
    let inbox = Inbox {
        notes: vec![Kept {
            message: link.clone(),
            conversation: Some(Conversation::Person("ann".into())),
        }],
        turns: vec![second.clone()],
        sent: Vec::new(),
        owners_asked: Vec::new(),
    };
    write_json(&data.join("inbox.json"), &inbox).unwrap();
    let third = from_ann("m-3", json!({"type": "text", "text": "third"}));
    write_spool(&data, &[link, second, third]);

    let host = restart(&data, "done");
    assert_eq!(answered(&host), ["m-2", "m-3"]);
    let first = String::from_utf8(host.requests[0].body.clone()).unwrap();
    assert_eq!(first.matches("link-mark").count(), 1, "{first}");
    assert!(!spool(&data).exists());
}

#[test]
fn a_malformed_line_in_arrived_is_skipped_with_a_note_and_loses_no_other_message() {
    let data = world(CONFIG);
    let second = from_ann("m-2", json!({"type": "text", "text": "second"})).to_line();
    let third = from_ann("m-3", json!({"type": "text", "text": "third"})).to_line();
    std::fs::write(
        spool(&data),
        format!("{second}\n{{\"id\": \"m-x\", cut\n{third}\n"),
    )
    .unwrap();

    // What the agent prints on stderr at its start.
    let mut read = Arrived::new(Some(spool(&data)));
    let notes = read.load(HashSet::new());
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("arrived.jsonl line 2: skipped, not a message"),
        "{notes:?}"
    );

    let host = restart(&data, "done");
    assert_eq!(answered(&host), ["m-2", "m-3"]);
    assert!(!spool(&data).exists());
}

#[test]
fn what_arrives_during_a_request_is_kept_once_and_its_file_goes() {
    let data = world(CONFIG);
    let host = ScriptedHost {
        events: vec![says("m-1", "ann", "member", "first")].into(),
        arrivals: vec![(
            0,
            from_ann("m-2", json!({"type": "text", "text": "second"})),
        )],
        respond: Some(Box::new(|_| text("done"))),
        ..ScriptedHost::default()
    };
    let mut agent = Agent::new(host, &data, "agent", "2", false);
    agent.run();
    assert_eq!(answered(&agent.host), ["m-1", "m-2"]);
    assert!(!spool(&data).exists());
    assert!(restart(&data, "again").sent.is_empty());
}

#[test]
fn a_message_kept_in_the_file_keeps_its_trace() {
    let data = world(CONFIG);
    let path = data.join("arrived.jsonl");
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut message = from_ann("m-1", json!({"type": "text", "text": "hi"}));
    message.trace = Some(trace.into());
    Arrived::new(Some(path.clone())).add(vec![message]);
    let mut after_a_kill = Arrived::new(Some(path));
    assert!(after_a_kill.load(HashSet::new()).is_empty());
    let read = after_a_kill.next().expect("the message");
    assert_eq!(read.trace.as_deref(), Some(trace));
}
