//! Shadow upgrades (DESIGN §21) through real worlds: an upgrade tried on the actor's own recent
//! messages and files before it lands. `shadowy` behaves by its version number, so one build
//! plays the running version and each candidate.

mod support;

use serde_json::{Value, json};
use support::*;

/// A source folder for `shadowy` with a transcript (so the upgrade skips the smoke test's two
/// seconds) and, if given, a manifest.
fn shadowy_source(world: &TestWorld, name: &str, manifest: Option<Value>) -> String {
    let dir = world.path(&format!("private/console/data/{name}"));
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("tests/double.jsonl"),
        "{\"send\": {\"type\": \"double\", \"n\": 2}}\n{\"expect\": {\"type\": \"doubled\", \"result\": 4}}\n",
    )
    .unwrap();
    if let Some(manifest) = manifest {
        std::fs::write(dir.join("actor.json"), manifest.to_string()).unwrap();
    }
    dir.to_str().unwrap().to_string()
}

fn upgrade(host: &mut Host, source: &str, shadow: Option<&str>) -> Value {
    let mut request = json!({
        "type": "upgrade", "actor": "s", "wasm": wasm("shadowy"), "source": source,
    });
    if let Some(shadow) = shadow {
        request["shadow"] = json!(shadow);
    }
    host.request(request)
}

/// Sends `body` to `s` and waits for its answer of type `answer`.
fn ask(host: &mut Host, body: Value, answer: &str) -> Value {
    host.tell("s", body);
    host.wait_type("s", answer)
}

fn installed_version(world: &TestWorld) -> Value {
    world.json("sausage.json")["actors"]["s"]["version"].clone()
}

#[test]
fn a_version_that_changes_one_answer_out_of_many_is_reported_with_exactly_that_message() {
    let world = TestWorld::new();
    world.install("s", "shadowy");
    let mut host = world.run();
    for n in 1..=12 {
        ask(&mut host, json!({"type": "double", "n": n}), "doubled");
    }
    let source = shadowy_source(&world, "v2", None);
    let reply = upgrade(&mut host, &source, None);
    assert_eq!(reply["type"], "upgraded", "{reply}");
    let shadow = &reply["shadow"];
    assert_eq!(shadow["messages"], 12, "{shadow}");
    assert_eq!(shadow["same"], 11, "{shadow}");
    assert_eq!(shadow["noisy"], 0, "{shadow}");
    assert_eq!(shadow["crashed"], Value::Null, "{shadow}");
    assert_eq!(shadow["files"], json!([]), "{shadow}");
    let different = shadow["different"].as_array().unwrap();
    assert_eq!(different.len(), 1, "{shadow}");
    assert_eq!(
        different[0]["message"]["body"],
        json!({"type": "double", "n": 7})
    );
    assert_eq!(different[0]["message"]["from"], "console");
    assert_eq!(different[0]["old"][0]["body"]["result"], 14);
    assert_eq!(different[0]["new"][0]["body"]["result"], 15);
    // "report" installs: the new version answers.
    assert_eq!(installed_version(&world), 2);
    let answer = ask(&mut host, json!({"type": "double", "n": 7}), "doubled");
    assert_eq!(answer["result"], 15);
    host.quit();
}

#[test]
fn same_refuses_a_difference_and_changes_nothing() {
    let world = TestWorld::new();
    world.install("s", "shadowy");
    let mut host = world.run();
    for n in [3, 7, 9] {
        ask(&mut host, json!({"type": "double", "n": n}), "doubled");
    }
    let source = shadowy_source(&world, "v2", None);
    let reply = upgrade(&mut host, &source, Some("same"));
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(reply["request"], "upgrade");
    let reason = reply["reason"].as_str().unwrap();
    assert!(
        reason.contains("differs") && reason.contains("\"n\":7") && reason.contains("\"report\""),
        "{reason}"
    );
    assert_eq!(
        reply["shadow"]["different"][0]["new"][0]["body"]["result"],
        15
    );
    assert_eq!(installed_version(&world), 1);
    assert!(
        !world.path("broker/versions/s/2").exists(),
        "nothing stored"
    );
    // The running version still answers, and the next upgrade is still number 2.
    let answer = ask(&mut host, json!({"type": "double", "n": 7}), "doubled");
    assert_eq!(answer["result"], 14);
    let reply = upgrade(&mut host, &source, Some("off"));
    assert_eq!(reply["type"], "upgraded", "{reply}");
    assert_eq!(reply["version"], 2);
    assert!(reply.get("shadow").is_none(), "off runs no shadow: {reply}");
    host.quit();
}

#[test]
fn a_version_that_breaks_on_an_old_record_in_data_is_refused_with_the_message_that_broke_it() {
    let world = TestWorld::new();
    world.install("s", "shadowy");
    // A window of 4: the records written first are older than it, in the files it starts from.
    let manifest = json!({"window": 4});
    std::fs::write(
        world.path("actor/s/source/actor.json"),
        manifest.to_string(),
    )
    .unwrap();
    let mut host = world.run();
    for text in ["a", "b", "c"] {
        ask(
            &mut host,
            json!({"type": "record", "text": text}),
            "recorded",
        );
    }
    let source = shadowy_source(&world, "v2", Some(manifest.clone()));
    let reply = upgrade(&mut host, &source, None);
    assert_eq!(reply["type"], "upgraded", "{reply}");
    for n in 1..=4 {
        ask(&mut host, json!({"type": "double", "n": n}), "doubled");
    }
    assert_eq!(
        ask(&mut host, json!({"type": "count"}), "count")["count"],
        3
    );

    // Version 3 panics on a record without "v": every record in /data is one.
    let source = shadowy_source(&world, "v3", Some(manifest));
    let reply = upgrade(&mut host, &source, None);
    assert_eq!(reply["type"], "error", "{reply}");
    let reason = reply["reason"].as_str().unwrap();
    assert!(
        reason.contains("version 3 of `s` crashed on message")
            && reason.contains("{\"type\":\"count\"}")
            && reason.contains("a record of version 3"),
        "{reason}"
    );
    let shadow = &reply["shadow"];
    assert_eq!(
        shadow["crashed"]["message"]["body"]["type"], "count",
        "{shadow}"
    );
    let messages = shadow["messages"].as_u64().unwrap();
    assert!(
        (4..=5).contains(&messages),
        "a window of 4 replays 4 or 5: {shadow}"
    );
    assert_eq!(installed_version(&world), 2);
    assert_eq!(
        ask(&mut host, json!({"type": "count"}), "count")["count"],
        3
    );
    host.quit();
}

#[test]
fn time_and_random_in_an_answer_are_replayed_and_not_held_against_the_candidate() {
    let world = TestWorld::new();
    world.install("s", "shadowy");
    let mut host = world.run();
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(ask(&mut host, json!({"type": "noise"}), "noise"));
    }
    assert_ne!(answers[0]["lucky"], answers[1]["lucky"], "really random");
    let source = shadowy_source(&world, "v2", None);
    let reply = upgrade(&mut host, &source, Some("same"));
    assert_eq!(reply["type"], "upgraded", "{reply}");
    assert_eq!(reply["shadow"]["messages"], 5, "{reply}");
    assert_eq!(reply["shadow"]["same"], 5, "{reply}");
    host.quit();
}

#[test]
fn a_window_of_zero_keeps_nothing_and_a_wrong_shadow_is_refused() {
    let world = TestWorld::new();
    world.install("s", "shadowy");
    std::fs::write(world.path("actor/s/source/actor.json"), r#"{"window": 0}"#).unwrap();
    let mut host = world.run();
    ask(&mut host, json!({"type": "double", "n": 7}), "doubled");
    let source = shadowy_source(&world, "v2", None);
    for bad in [json!("maybe"), json!(1), json!({"mode": "same"})] {
        let mut request = json!({
            "type": "upgrade", "actor": "s", "wasm": wasm("shadowy"), "source": source,
        });
        request["shadow"] = bad.clone();
        let reply = host.request(request);
        assert_eq!(reply["type"], "error", "{bad}: {reply}");
        let reason = reply["reason"].as_str().unwrap();
        assert!(
            reason.contains("`shadow`") && reason.contains("\"same\""),
            "{bad}: {reason}"
        );
    }
    assert_eq!(installed_version(&world), 1);
    let reply = upgrade(&mut host, &source, Some("same"));
    assert_eq!(reply["type"], "upgraded", "{reply}");
    assert_eq!(reply["shadow"]["messages"], 0, "{reply}");
    host.quit();
}

#[test]
fn a_fork_answers_as_the_original_did_before_that_message() {
    let world = TestWorld::new();
    world.install("s", "shadowy");
    let mut host = world.run();
    for text in ["a", "b", "c"] {
        ask(
            &mut host,
            json!({"type": "record", "text": text}),
            "recorded",
        );
    }
    assert_eq!(
        ask(&mut host, json!({"type": "count"}), "count")["count"],
        3
    );
    let window = host.request(json!({"type": "window", "actor": "s"}));
    assert_eq!(window["type"], "window", "{window}");
    let messages = window["messages"].as_array().unwrap();
    let bodies: Vec<&Value> = messages.iter().map(|m| &m["body"]).collect();
    assert_eq!(
        bodies,
        [
            &json!({"type": "record", "text": "a"}),
            &json!({"type": "record", "text": "b"}),
            &json!({"type": "record", "text": "c"}),
            &json!({"type": "count"}),
        ]
    );
    assert!(
        messages
            .iter()
            .all(|m| m["from"] == "console" && m["at"].is_string())
    );
    let third = messages[2]["id"].as_str().unwrap();

    let forked = host.request(json!({"type": "fork", "actor": "s", "before": third, "as": "t"}));
    assert_eq!(forked["type"], "forked", "{forked}");
    assert_eq!(forked["replayed"], 2);
    assert_eq!(forked["version"], 1);
    host.tell("t", json!({"type": "count"}));
    let count = host.wait_type("t", "count");
    assert_eq!(
        count["count"], 2,
        "the fork holds the two records before the third"
    );
    assert_eq!(
        ask(&mut host, json!({"type": "count"}), "count")["count"],
        3
    );
    let meta = world.json("broker/versions/t/1/meta.json");
    assert_eq!(meta["forked_from"]["actor"], "s");
    assert_eq!(meta["forked_from"]["before"], third);

    // Wrong forks say what to do, and make nothing.
    for (request, says) in [
        (
            json!({"type": "fork", "actor": "s", "before": "m-999999", "as": "u"}),
            "is not a message of `s`'s window",
        ),
        (
            json!({"type": "fork", "actor": "s", "before": third, "as": "t"}),
            "already exists",
        ),
        (
            json!({"type": "fork", "actor": "s", "before": third, "as": "Bad Id"}),
            "`as`",
        ),
        (json!({"type": "fork", "actor": "s", "as": "u"}), "`before`"),
        (
            json!({"type": "fork", "actor": "cargo", "before": third, "as": "u"}),
            "native",
        ),
        (
            json!({"type": "fork", "actor": "nobody", "before": third, "as": "u"}),
            "nobody",
        ),
        (json!({"type": "window", "actor": "nobody"}), "nobody"),
    ] {
        let reply = host.request(request.clone());
        assert_eq!(reply["type"], "error", "{request}: {reply}");
        let reason = reply["reason"].as_str().unwrap();
        assert!(reason.contains(says), "{request}: {reason}");
    }
    assert!(!world.path("broker/versions/u").exists());
    host.quit();
}

/// A shadow run (DESIGN §21) reaches no network and no host file, whatever the candidate's
/// manifest allows: a candidate that fetches a local listener (its `actor.json` names it) gets
/// an error where the running version answered, and the listener sees no connection; one that
/// reads the world's credentials by `..` or by their host path gets errors, and no reply in
/// the report holds the secret.
#[test]
fn a_shadow_run_reaches_no_network_and_no_host_file() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let world = TestWorld::new();
    world.install("net", "echo");
    world.install("files", "echo");
    std::fs::create_dir_all(world.path("broker/credentials")).unwrap();
    let credentials = world.path("broker/credentials/agent.json");
    std::fs::write(
        &credentials,
        json!({"base_url": "http://127.0.0.1:9", "header": "authorization", "value": "Bearer sk-secret"})
            .to_string(),
    )
    .unwrap();
    let mut host = world.run();
    // The windows: what the running versions (echo) read.
    let url = format!("http://{addr}/leak");
    host.tell("net", json!({"type": "get", "url": url}));
    host.wait_type("net", "get");
    let paths = [
        "/actor/../broker/credentials/agent.json".to_string(),
        "/data/../../../broker/credentials/agent.json".to_string(),
        "/public/../../../broker/credentials/agent.json".to_string(),
        credentials.to_str().unwrap().to_string(),
    ];
    for path in &paths {
        host.tell("files", json!({"type": "read", "path": path}));
        host.wait_type("files", "read");
    }

    let source = world.path("private/console/data/net-v2");
    std::fs::create_dir_all(&source).unwrap();
    std::fs::write(
        source.join("actor.json"),
        json!({"network": [addr]}).to_string(),
    )
    .unwrap();
    let reply = host.request(json!({
        "type": "upgrade", "actor": "net", "wasm": wasm("fetcher"), "source": source,
    }));
    let different = reply["shadow"]["different"].as_array().unwrap();
    assert_eq!(different.len(), 1, "{reply}");
    assert_eq!(different[0]["old"][0]["body"]["type"], "get", "{reply}");
    assert_eq!(
        different[0]["new"][0]["body"]["type"], "http_error",
        "{reply}"
    );
    assert!(
        listener.accept().is_err(),
        "the shadow run connected to the listener: {reply}"
    );
    // The listener does see a version that may connect: the one installed, outside the shadow.
    host.tell("net", json!({"type": "get", "url": url}));
    eventually("the installed version connects", || {
        listener.accept().is_ok()
    });

    let reply = host.request(json!({
        "type": "upgrade", "actor": "files", "wasm": wasm("fsprobe"), "source": source,
    }));
    let different = reply["shadow"]["different"].as_array().unwrap();
    assert_eq!(different.len(), paths.len(), "{reply}");
    for one in different {
        assert_eq!(one["new"][0]["body"]["type"], "fs_error", "{one}");
    }
    assert!(!reply.to_string().contains("sk-secret"), "{reply}");
    host.quit();
}

#[test]
fn a_rollback_keeps_the_window_so_the_next_candidate_is_still_tried_on_real_traffic() {
    let world = TestWorld::new();
    world.install("s", "shadowy");
    let mut host = world.run();
    for text in ["a", "b", "c"] {
        ask(
            &mut host,
            json!({"type": "record", "text": text}),
            "recorded",
        );
    }
    let source = shadowy_source(&world, "v2", None);
    assert_eq!(upgrade(&mut host, &source, None)["type"], "upgraded");
    assert_eq!(
        ask(&mut host, json!({"type": "count"}), "count")["count"],
        3
    );
    let rolled = host.request(json!({"type": "rollback", "actor": "s"}));
    assert_eq!(rolled["type"], "rolled_back", "{rolled}");
    assert_eq!(installed_version(&world), 1);
    let window = host.request(json!({"type": "window", "actor": "s"}));
    let kept = window["messages"].as_array().unwrap().len();
    assert!(
        kept >= 4,
        "the rollback kept the window's messages: {window}"
    );

    // Version 3 panics on a record without "v", which the restored files hold; the count in
    // the window, read before the rollback, shows it.
    let source = shadowy_source(&world, "v3", None);
    let reply = upgrade(&mut host, &source, None);
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(
        reply["shadow"]["crashed"]["message"]["body"]["type"], "count",
        "{reply}"
    );
    assert_eq!(installed_version(&world), 1);
    host.quit();
}
