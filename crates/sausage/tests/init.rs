//! `sausage init` end to end: the questions answered by flags, the environment or stdin, the
//! agent built from the source the binary carries, and the new world answering through the
//! agent.

mod support;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use sausage_fake_llm::{FakeLlm, TOKEN, openai};
use support::*;

#[test]
fn init_builds_and_registers_the_agent_and_the_world_answers() {
    let fake = FakeLlm::start();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    // Only the dependencies come pre-built; the agent itself is built by the world's cargo.
    warm_cargo_for_agent(&root, "boss");
    let out = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .arg("init")
        .arg(&root)
        .args([
            "--api",
            "openai-responses",
            "--base-url",
            &fake.base_url(),
            "--model",
            "m-1",
            "--owner",
            "boss",
        ])
        .env("SAUSAGE_API_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("deploy: agent runs version 1"), "{stdout}");
    assert!(
        stdout.contains("sausage run"),
        "it says what to do next: {stdout}"
    );

    let world = TestWorld::adopt(dir, root);
    assert_eq!(world.json("sausage.json")["actors"]["agent"]["version"], 1);
    let people = world.json("broker/people.json");
    assert_eq!(
        people["people"][0]["id"], "boss",
        "the first owner: {people}"
    );
    assert_eq!(people["people"][0]["tier"], "owner");
    assert_eq!(
        people["surfaces"]["agent"], "person",
        "the agent may act for people"
    );
    assert_eq!(
        world.json("sausage.json")["subscriptions"]["agent"],
        serde_json::json!(["console"])
    );
    let config = world.json("private/agent/data/config.json");
    assert_eq!(config["api"], "openai-responses");
    assert_eq!(config["model"], "m-1");
    assert_eq!(config["max_turn_usd"], 5.0, "budgets a person can edit");
    assert_eq!(config["max_day_usd"], 25.0);
    assert_eq!(config.get("token"), None, "the host keeps the token");
    let credentials = world.json("broker/credentials/agent.json");
    assert_eq!(credentials["header"], "authorization");
    assert_eq!(credentials["value"], format!("Bearer {TOKEN}"));
    assert_eq!(credentials["base_url"], fake.base_url());
    let host = fake.base_url().replace("http://", "");
    assert_eq!(
        world.json("actor/agent/source/actor.json"),
        serde_json::json!({ "network": [host], "window": 0 }),
        "the agent keeps no window: its messages are people's conversations"
    );
    assert!(world.path("actor/agent/source/src/main.rs").is_file());
    assert_eq!(
        world.json("broker/versions/agent/1/meta.json")["built_by"],
        "cargo"
    );

    fake.push_openai(openai::text_reply("Ready when you are."));
    let mut host = world.run();
    host.send("hello");
    let answer = host.wait_for_within(Duration::from_secs(60), "the agent's reply", |m| {
        m.from == "agent" && m.body["type"] == "text"
    });
    assert_eq!(answer.body["text"], "Ready when you are.");
    assert!(host.quit().success());
    assert_eq!(
        world.visible_files_containing(TOKEN),
        Vec::<std::path::PathBuf>::new(),
        "no file an actor can see holds the token"
    );
}

/// Runs `sausage init DIR ARGS…` with `answers` on stdin and no token in the environment.
fn init(root: &std::path::Path, args: &[&str], answers: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sausage"))
        .arg("init")
        .arg(root)
        .args(args)
        .env_remove("SAUSAGE_API_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(answers.as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

#[test]
fn a_local_openai_chat_server_needs_no_token() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    warm_cargo_for_agent(&root, sausage_core::people::DEFAULT_OWNER);
    let args = [
        "--api",
        "openai-chat",
        "--base-url",
        "http://127.0.0.1:8080",
        "--model",
        "local",
    ];
    // The token question is answered with an empty line.
    let out = init(&root, &args, "\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("empty if the server needs none"),
        "{stdout}"
    );
    assert!(stdout.contains("deploy: agent runs version 1"), "{stdout}");
    let world = TestWorld::adopt(dir, root);
    let config = world.json("private/agent/data/config.json");
    assert_eq!(config["api"], "openai-chat");
    assert_eq!(config["base_url"], "http://127.0.0.1:8080");
    assert!(
        !world.path("broker/credentials/agent.json").exists(),
        "no token, no credentials: nothing is added to the agent's requests"
    );
    assert_eq!(
        world.json("actor/agent/source/actor.json"),
        serde_json::json!({ "network": ["127.0.0.1:8080"], "window": 0 })
    );
}

#[test]
fn an_unknown_api_shape_is_refused_naming_the_three() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    let args = ["--api", "soap", "--base-url", "https://x", "--model", "m"];
    let out = init(&root, &args, "t\n");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "`soap` is not an API shape Sausage speaks; choose openai-responses, \
             anthropic-messages or openai-chat"
        ),
        "{stderr}"
    );
    assert!(
        !root.join("sausage.json").exists(),
        "no world is left behind"
    );
}

#[test]
fn a_wrong_owner_or_matrix_answer_is_refused_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    let model = [
        "--api",
        "openai-chat",
        "--base-url",
        "http://127.0.0.1:1",
        "--model",
        "m",
    ];
    for (extra, says) in [
        (
            &["--owner", "The Boss"][..],
            "--owner: person id `The Boss`",
        ),
        (
            &["--matrix", "matrix.example.org", "--matrix-user", "@bot:x"],
            "not an http:// or https:// URL",
        ),
        (
            &["--matrix", "http://127.0.0.1:1", "--matrix-user", "bot"],
            "not a Matrix user id",
        ),
    ] {
        let args: Vec<&str> = model.iter().chain(extra).copied().collect();
        let out = init(&root, &args, "\n");
        assert!(!out.status.success(), "{extra:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert!(
            !root.join("sausage.json").exists(),
            "{extra:?}: no world is left behind"
        );
    }
}
