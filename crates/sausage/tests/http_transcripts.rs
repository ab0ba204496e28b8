//! Transcripts' `http` steps (DESIGN §24) and shadow runs of HTTP answers (§21) through a
//! running world: a spawn tested by requests as the public address sends them, an upgrade whose
//! transcript fails (the running version keeps answering at the public address), and an upgrade
//! that answers a request differently, which the shadow report shows and `"same"` refuses.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::http::{Response, request};
use support::*;

/// The address the running host of `world` serves its routes at.
fn public_address(world: &TestWorld) -> String {
    let path = world.path("broker/http/address");
    eventually("the public address to be recorded", || path.exists());
    std::fs::read_to_string(path).unwrap()
}

/// `webapp`'s source in `dir/name`, served at `/api/*` (passing `authorization`), with
/// webapp's own transcripts and `extra` ones (name, text).
fn webapp_source(dir: &Path, name: &str, extra: &[(&str, &str)]) -> String {
    let source = dir.join(name);
    std::fs::create_dir_all(source.join("tests")).unwrap();
    for test in std::fs::read_dir(support::source("webapp").join("tests")).unwrap() {
        let test = test.unwrap().path();
        std::fs::copy(&test, source.join("tests").join(test.file_name().unwrap())).unwrap();
    }
    for (name, text) in extra {
        std::fs::write(source.join("tests").join(name), text).unwrap();
    }
    let manifest = json!({"http": [{"path": "/api/*", "rate": 0, "pass": ["authorization"]}]});
    std::fs::write(source.join("actor.json"), manifest.to_string()).unwrap();
    source.display().to_string()
}

fn get(addr: &str, path: &str) -> Response {
    request(addr, "GET", path, &[], b"")
}

fn spawn_shop(host: &mut Host, source: &str) {
    let spawned = host.request(json!({
        "type": "spawn", "actor": "shop", "wasm": wasm("webapp"), "source": source,
    }));
    assert_eq!(spawned["type"], "spawned", "{spawned}");
}

fn upgrade(host: &mut Host, source: &str, shadow: Option<&str>) -> Value {
    let mut request = json!({
        "type": "upgrade", "actor": "shop", "wasm": wasm("webapp"), "source": source,
    });
    if let Some(shadow) = shadow {
        request["shadow"] = json!(shadow);
    }
    host.request(request)
}

fn installed_version(world: &TestWorld) -> Value {
    world.json("sausage.json")["actors"]["shop"]["version"].clone()
}

#[test]
fn http_steps_test_a_spawn_and_an_upgrade_that_answers_wrong_is_refused() {
    let world = TestWorld::new();
    let dir = tempfile::tempdir().unwrap();
    let mut host = world.run();
    // webapp's own transcripts ask over `http` steps, a streamed answer among them; a header
    // is passed as the route of its `actor.json` passes it.
    let passed = "{\"http\": {\"path\": \"/api/echo\", \"headers\": {\"Authorization\": \"Bearer t\"}}}\n\
                  {\"expect_http\": {\"body\": {\"headers\": {\"authorization\": \"Bearer t\"}}}}\n";
    spawn_shop(
        &mut host,
        &webapp_source(dir.path(), "v1", &[("passed.jsonl", passed)]),
    );
    let addr = public_address(&world);
    assert_eq!(get(&addr, "/api/version").text(), "version 1");

    let wrong = "{\"send\": {\"type\": \"hello\"}}\n\
                 {\"http\": {\"path\": \"/api/status/404\"}}\n\
                 {\"expect_http\": {\"status\": 200, \"body\": \"found\"}}\n";
    let source = webapp_source(dir.path(), "v2", &[("wrong.jsonl", wrong)]);
    let reply = upgrade(&mut host, &source, None);
    assert_eq!(reply["type"], "error", "{reply}");
    let reason = reply["reason"].as_str().unwrap();
    assert!(
        reason.contains("tests/wrong.jsonl line 3: expected an answer")
            && reason.contains("\"found\"")
            && reason.contains("got status 404 and body \"status 404\""),
        "{reason}"
    );
    // Refused, it changed nothing: the running version answers at the public address.
    assert_eq!(installed_version(&world), 1);
    let answer = get(&addr, "/api/version");
    assert_eq!((answer.status, answer.text()), (200, "version 1".into()));
    assert!(host.quit().success());
}

#[test]
fn a_shadow_run_compares_http_answers_and_same_refuses_a_different_one() {
    let world = TestWorld::new();
    let dir = tempfile::tempdir().unwrap();
    let mut host = world.run();
    let source = webapp_source(dir.path(), "shop", &[]);
    spawn_shop(&mut host, &source);
    let addr = public_address(&world);
    for path in ["/api/version", "/api/status/201", "/api/version"] {
        assert_eq!(get(&addr, path).status / 100, 2, "{path}");
    }

    // Version 2 answers `/version` otherwise: "same" refuses it with the request and both
    // answers, and the running version goes on answering.
    let refused = upgrade(&mut host, &source, Some("same"));
    assert_eq!(refused["type"], "error", "{refused}");
    let reason = refused["reason"].as_str().unwrap();
    assert!(
        reason.contains("differs") && reason.contains("/api/version"),
        "{reason}"
    );
    let shadow = &refused["shadow"];
    assert_eq!(shadow["messages"], 3, "{shadow}");
    assert_eq!(shadow["same"], 1, "{shadow}");
    assert_eq!(shadow["noisy"], 0, "{shadow}");
    let different = shadow["different"].as_array().unwrap();
    assert_eq!(different.len(), 2, "{shadow}");
    for differs in different {
        assert_eq!(differs["message"]["from"], "http", "{differs}");
        assert_eq!(differs["message"]["body"]["path"], "/api/version");
        assert_eq!(differs["old"][0]["to"], "http", "{differs}");
        assert_eq!(differs["old"][0]["body"]["body"], "version 1");
        assert_eq!(differs["new"][0]["body"]["body"], "version 2");
    }
    assert_eq!(installed_version(&world), 1);
    assert_eq!(get(&addr, "/api/version").text(), "version 1");

    // "report" (the default) installs it with the same report.
    let upgraded = upgrade(&mut host, &source, None);
    assert_eq!(upgraded["type"], "upgraded", "{upgraded}");
    assert_eq!(upgraded["shadow"]["different"].as_array().unwrap().len(), 3);
    assert_eq!(get(&addr, "/api/version").text(), "version 2");
    assert!(host.quit().success());
}
