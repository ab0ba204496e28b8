//! Tests of `delegate` (DESIGN §26) through [`ScriptedHost`]: who may delegate to which role,
//! a role file that is wrong, and what the broker is asked.

use serde_json::{Value, json};

use super::people_tests::{CONFIG, call, reply, run, says, text, tool_results, world};

/// The `delegate` requests the agent sent the broker.
fn delegations(host: &crate::testing::ScriptedHost) -> Vec<Value> {
    (host.sent.iter())
        .filter(|m| m.to.as_deref() == Some("broker") && m.body["type"] == "delegate")
        .map(|m| m.body.clone())
        .collect()
}

#[test]
fn a_guests_turn_delegates_no_role_that_changes_things_and_nothing_is_asked() {
    let data = world(CONFIG);
    let host = run(
        &data,
        vec![says("m-1", "gus", "guest", "fix it")],
        vec![
            call(
                "delegate",
                json!({"role": "worker", "brief": "Fix the notes actor."}),
            ),
            text("I may not."),
        ],
    );
    let results = tool_results(&host);
    assert!(
        results[0].starts_with("refused: this turn is a guest's"),
        "{results:?}"
    );
    assert!(
        results[0].contains("such as scout or reviewer"),
        "{results:?}"
    );
    assert!(delegations(&host).is_empty(), "nothing asked of the broker");
}

#[test]
fn a_bad_role_file_is_refused_where_it_is_wrong_and_an_unknown_role_names_the_others() {
    let data = world(CONFIG);
    std::fs::create_dir_all(data.join("roles")).unwrap();
    std::fs::write(
        data.join("roles/tester.md"),
        "---\ndescription: Tests.\nmax_minutes: soon\n---\nTest.\n",
    )
    .unwrap();
    let host = run(
        &data,
        vec![says("m-1", "olga", "owner", "test it")],
        vec![
            call(
                "delegate",
                json!({"role": "tester", "brief": "Run the tests."}),
            ),
            call("delegate", json!({"role": "painter", "brief": "Paint."})),
            call("delegate", json!({"role": "scout"})),
            text("Done."),
        ],
    );
    let results = tool_results(&host);
    assert!(
        results[0].contains("role `tester` was refused"),
        "{results:?}"
    );
    assert!(results[0].contains("tester.md:3:14"), "{results:?}");
    assert!(
        results[1].contains("no role is called `painter`"),
        "{results:?}"
    );
    assert!(
        results[1].contains("worker, scout, reviewer"),
        "{results:?}"
    );
    assert!(results[2].contains("`brief`"), "{results:?}");
    assert!(delegations(&host).is_empty());
    // The roles the model may choose are in its instructions.
    let body: Value = serde_json::from_slice(&host.requests[0].body).unwrap();
    let prompt = body["instructions"].as_str().unwrap();
    assert!(
        prompt.contains("- scout: Looks around without changing anything"),
        "{prompt}"
    );
}

#[test]
fn a_delegation_asks_the_broker_for_the_role_with_the_turns_budget_and_the_person() {
    let mut config: Value = serde_json::from_str(CONFIG).unwrap();
    config["prices"] = json!({"m": {"input": 1.0, "output": 1.0}});
    config["max_turn_usd"] = json!(2.0);
    let data = world(&config.to_string());
    let refused = json!({"type": "error", "request": "delegate", "reason": "not today"});
    let host = run(
        &data,
        vec![
            says("m-1", "olga", "owner", "look around"),
            reply("m-2", "broker", "agent/person.olga.d1", refused),
        ],
        vec![
            call(
                "delegate",
                json!({"role": "scout", "brief": "Look in /data."}),
            ),
            text("No scouts today."),
        ],
    );
    let results = tool_results(&host);
    assert_eq!(
        results,
        ["error: the broker made no sub-agent: not today"],
        "{results:?}"
    );
    let asked = delegations(&host);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["role"]["role"], "scout");
    assert_eq!(asked[0]["brief"], "Look in /data.");
    let prompt = asked[0]["role"]["prompt"].as_str().unwrap();
    assert!(prompt.contains("You are a scout"), "{prompt}");
    let budget = asked[0]["role"]["budget_usd"].as_f64().unwrap();
    assert!(budget > 0.0 && budget <= 2.0, "{budget}");
    let message = asked[0]["message"].as_str().unwrap();
    assert!(message.starts_with("agent/person.olga.d"), "{message}");
    let sent = (host.sent.iter())
        .find(|m| m.body["type"] == "delegate")
        .unwrap();
    assert_eq!(sent.speaks_for.as_deref(), Some("olga"));
}

#[test]
fn a_turn_that_ends_without_waiting_dismisses_the_sub_agents_it_left() {
    use super::delegate::SavedDelegation;
    use super::*;
    let data = world(CONFIG);
    let message = Incoming {
        id: "m-1".into(),
        from: "web".into(),
        person: Some("olga".into()),
        tier: Some("owner".into()),
        body: json!({"type": "text", "text": "go"}),
        ..Incoming::default()
    };
    let conversation = Conversation::of_text(&message, &data).unwrap();
    let saved = SavedDelegation {
        call_id: "c1".into(),
        role: "scout".into(),
        brief: "look".into(),
        request: Some("agent/person.olga.d1".into()),
        message: Some("agent/person.olga.d1.brief".into()),
        actor: Some("agent-s1".into()),
        sent_at: 1,
        output: None,
    };
    let turn = SavedTurn {
        steps: 1,
        resumes: MAX_RESUMES - 1,
        delegations: vec![saved],
        ..SavedTurn::new(message, conversation)
    };
    write_json(&data.join("turn.json"), &turn).unwrap();
    // Restarted once too often: the turn ends in words, and its scout is dismissed.
    let host = run(&data, vec![], vec![]);
    let dismissed: Vec<&Value> = (host.sent.iter())
        .filter(|m| m.body["type"] == "dismiss")
        .map(|m| &m.body)
        .collect();
    assert_eq!(
        dismissed,
        [&json!({"type": "dismiss", "actor": "agent-s1"})]
    );
}
