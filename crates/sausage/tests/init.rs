//! `sausage init` end to end: the questions answered by flags and the environment, the agent
//! built from the source the binary carries, and the new world answering through the agent.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::fake_llm::{FakeLlm, TOKEN, openai};
use support::*;

#[test]
fn init_builds_and_registers_the_agent_and_the_world_answers() {
    let fake = FakeLlm::start();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("world");
    // Only the dependencies come pre-built; the agent itself is built by the world's cargo.
    warm_cargo_for_agent(&root);
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
    assert_eq!(
        world.json("sausage.json")["subscriptions"]["agent"],
        serde_json::json!(["console"])
    );
    let config = world.json("private/agent/data/config.json");
    assert_eq!(config["api"], "openai-responses");
    assert_eq!(config["model"], "m-1");
    assert_eq!(config.get("token"), None, "the host keeps the token");
    let credentials = world.json("broker/credentials/agent.json");
    assert_eq!(credentials["header"], "authorization");
    assert_eq!(credentials["value"], format!("Bearer {TOKEN}"));
    assert_eq!(credentials["base_url"], fake.base_url());
    let host = fake.base_url().replace("http://", "");
    assert_eq!(
        world.json("actor/agent/source/actor.json"),
        serde_json::json!({ "network": [host] })
    );
    assert!(world.path("actor/agent/source/src/main.rs").is_file());
    assert_eq!(
        world.json("broker/versions/agent/1/meta.json")["built_by"],
        "cargo"
    );

    fake.push_openai(openai::text_reply("Ready when you are."));
    let mut host = world.run();
    host.send("hello");
    let answer = host.wait_for_within(Duration::from_secs(60), "the agent", |m| m.from == "agent");
    assert_eq!(answer.body["text"], "Ready when you are.");
    assert!(host.quit().success());
    assert_eq!(
        world.visible_files_containing(TOKEN),
        Vec::<std::path::PathBuf>::new(),
        "no file an actor can see holds the token"
    );
}
